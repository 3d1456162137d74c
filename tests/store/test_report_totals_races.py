"""stream_report_totals under racing writers: its rows are written only by the triggers of
migration 0019, as deltas added under the row lock of an upsert, so two transactions writing one
stream's segments or sealed sizes at once must both be counted (neither delta lost, the version
moved once per statement), and the totals must equal a recount of the rows they stand for."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store.dsn import open_connection
from app.testing.controller import Services
from tests.store.test_versioned_races import race
from tests.support.txn_batches import controller_with_streams

SC, ST = "totals", "raced"


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with controller_with_streams(db_url, SC, (ST,)) as services:
        yield services


async def _stream_id(services: Services) -> int:
    sid: int = await services.pool.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = $2", SC, ST)
    return sid


async def _execute(db_url: str, sql: str, *args: object) -> None:
    # A plain driver connection of its own: the store's wrapper would hide a failure's cause
    # behind its domain error, and what is tested here is the database's own behaviour.
    conn = await open_connection(db_url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def _totals(services: Services, sid: int) -> tuple[int, int, int, int]:
    row = await services.pool.fetchrow(
        "SELECT segments_created, segments_sealed, sealed_bytes, version FROM stream_report_totals "
        "WHERE stream_id = $1",
        sid,
    )
    assert row is not None
    return row["segments_created"], row["segments_sealed"], row["sealed_bytes"], row["version"]


async def _recount(services: Services, sid: int) -> tuple[int, int, int]:
    row = await services.pool.fetchrow(
        "SELECT (SELECT count(*) FROM segments WHERE stream_id = $1) AS created, "
        "(SELECT count(sealed_epoch) FROM segments WHERE stream_id = $1) AS sealed, "
        "(SELECT COALESCE(sum(kv.value::bigint), 0) FROM sealed_size_shards z "
        " CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv WHERE z.stream_id = $1) AS bytes",
        sid,
    )
    assert row is not None
    return row["created"], row["sealed"], row["bytes"]


async def test_two_segment_inserts_of_one_stream_at_once_are_both_counted(
    services: Services, db_url: str
) -> None:
    sid = await _stream_id(services)
    created, sealed, size, version = await _totals(services, sid)

    def insert(number: int):  # type: ignore[no-untyped-def]
        async def write() -> int:
            await _execute(
                db_url,
                "INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, "
                "key_start, key_end, sealed_epoch) VALUES ($1, $2::bigint, $2::int, 0, 0, 0.0, 1.0, 0)",
                sid,
                number,
            )
            return number

        return write

    assert await race(services, "segments", [insert(101), insert(102)]) == [101, 102]
    assert await _totals(services, sid) == (created + 2, sealed + 2, size, version + 2)
    assert (await _totals(services, sid))[:3] == await _recount(services, sid)


async def test_two_sealed_size_writes_of_one_stream_at_once_are_both_counted(
    services: Services, db_url: str
) -> None:
    sid = await _stream_id(services)
    created, sealed, size, version = await _totals(services, sid)

    def sizes(shard: int, nbytes: int):  # type: ignore[no-untyped-def]
        async def write() -> int:
            await _execute(
                db_url,
                "INSERT INTO sealed_size_shards (stream_id, shard, sizes) VALUES ($1, $2, $3::jsonb) "
                "ON CONFLICT (stream_id, shard) DO UPDATE "
                "SET sizes = sealed_size_shards.sizes || EXCLUDED.sizes, "
                "version = sealed_size_shards.version + 1",
                sid,
                shard,
                f'{{"{900 + shard}": {nbytes}}}',
            )
            return shard

        return write

    assert await race(services, "sealed_size_shards", [sizes(7, 40), sizes(8, 2)]) == [7, 8]
    assert await _totals(services, sid) == (created, sealed, size + 42, version + 2)
    assert (await _totals(services, sid))[:3] == await _recount(services, sid)
