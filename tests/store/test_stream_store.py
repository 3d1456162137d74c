"""PgStreamStore and PgScopeStore against a real database: creation, numbering, listing, errors."""

from __future__ import annotations

import asyncio

import pytest

from app.domain.errors import NotEmpty, NotFound, StoreUnavailable
from app.domain.ids import qualified_segment_name, segment_id
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScopeState,
    StreamConfig,
    StreamState,
)
from app.services.scopes import ScopeOutcome
from app.services.streams import CreateStreamOutcome
from app.store.pool import create_pool
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore
from app.testing.controller import Services

SCOPE = "sc"
CONFIG = StreamConfig(
    ScalingPolicy.fixed(3),
    retention=RetentionPolicy(RetentionType.SIZE, 1000, 5000),
    tags=("b", "a"),
    timestamp_aggregation_timeout=7,
    rollover_size_bytes=1 << 20,
)

PER_STREAM_TABLES = (
    "stream_configs",
    "stream_states",
    "stream_current_epochs",
    "stream_truncations",
    "stream_epoch_transitions",
)


async def test_creation_writes_every_record_at_version_zero_in_one_transaction(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    # A creation time of now: an old one would be finished by the controller's creation sweep.
    created_at = services.clock.now_ms()
    creation = await services.stream_store.create_stream_metadata(SCOPE, "st", CONFIG, created_at)
    assert creation.created is True
    assert creation.state == StreamState.CREATING
    assert creation.config == CONFIG
    assert [s.id for s in creation.epoch_zero.sorted_segments()] == [0, 1, 2]

    pool = services.pool
    stream = await pool.fetchrow(
        "SELECT id, creation_time, xmin::text AS xmin FROM streams WHERE scope = $1 AND name = $2",
        SCOPE,
        "st",
    )
    assert stream["creation_time"] == created_at
    sid = stream["id"]
    xmins = {stream["xmin"]}

    for table in PER_STREAM_TABLES:
        rows = await pool.fetch(f"SELECT version, xmin::text AS xmin FROM {table} WHERE stream_id = $1", sid)
        assert [r["version"] for r in rows] == [0], table
        xmins.add(rows[0]["xmin"])

    assert await pool.fetchval("SELECT state FROM stream_states WHERE stream_id = $1", sid) == "CREATING"
    assert await pool.fetchval("SELECT epoch FROM stream_current_epochs WHERE stream_id = $1", sid) == 0
    transition = await pool.fetchrow("SELECT * FROM stream_epoch_transitions WHERE stream_id = $1", sid)
    assert transition["active_epoch"] == -1
    truncation = await pool.fetchrow("SELECT * FROM stream_truncations WHERE stream_id = $1", sid)
    assert (truncation["stream_cut"], truncation["size_till"], truncation["updating"]) == ({}, 0, False)
    config = await pool.fetchrow("SELECT * FROM stream_configs WHERE stream_id = $1", sid)
    assert (config["min_num_segments"], config["retention_type"], config["retention_param"]) == (3, 2, 1000)
    assert (config["tags"], config["rollover_size_bytes"], config["updating"]) == (["a", "b"], 1 << 20, False)

    epochs = await pool.fetch(
        "SELECT epoch, reference_epoch, creation_time, segment_ids, created_segments, xmin::text AS xmin "
        "FROM epochs WHERE stream_id = $1",
        sid,
    )
    assert [(e["epoch"], e["reference_epoch"], e["creation_time"]) for e in epochs] == [(0, 0, created_at)]
    assert epochs[0]["segment_ids"] == epochs[0]["created_segments"] == [0, 1, 2]
    xmins.add(epochs[0]["xmin"])

    segments = await pool.fetch(
        "SELECT segment_id, number, creation_epoch, creation_time, key_start, key_end, sealed_epoch, "
        "version, xmin::text AS xmin FROM segments WHERE stream_id = $1 ORDER BY segment_id",
        sid,
    )
    assert [
        (
            s["segment_id"],
            s["number"],
            s["creation_epoch"],
            s["creation_time"],
            s["sealed_epoch"],
            s["version"],
        )
        for s in segments
    ] == [(i, i, 0, created_at, None, 0) for i in range(3)]
    assert segments[0]["key_start"] == 0.0 and segments[-1]["key_end"] == 1.0
    xmins.update(s["xmin"] for s in segments)

    # Every row was written by the same transaction.
    assert len(xmins) == 1, xmins


async def test_failed_creation_leaves_nothing_behind(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    # Make the last insert of the creation fail, after the stream row and the other records.
    await services.pool.execute(
        """
        CREATE FUNCTION fail_segments() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
        CREATE TRIGGER fail_segments BEFORE INSERT ON segments
            FOR EACH ROW EXECUTE FUNCTION fail_segments();
        """
    )
    with pytest.raises(StoreUnavailable, match="injected failure"):
        await services.stream_store.create_stream_metadata(SCOPE, "st", CONFIG, 1)

    assert not await services.stream_store.stream_exists(SCOPE, "st")
    for table in (*PER_STREAM_TABLES, "streams", "epochs", "segments"):
        assert await services.pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table


async def test_recreated_stream_numbers_segments_after_the_deleted_one(services: Services) -> None:
    # A deleted 3-segment stream (segments 0, 1, 2) is recreated with 3 segments: numbers 3, 4, 5.
    await services.scopes.create_scope(SCOPE)
    await services.stream_store.put_deleted_stream(SCOPE, "st", 2, None)

    outcome = await services.streams.create_stream(SCOPE, "st", StreamConfig(ScalingPolicy.fixed(3)))
    assert outcome == CreateStreamOutcome.SUCCESS

    state, epoch = await services.stream_store.get_active_epoch(SCOPE, "st")
    assert state == StreamState.ACTIVE
    assert [s.number for s in epoch.sorted_segments()] == [3, 4, 5]
    assert [s.id for s in epoch.sorted_segments()] == [segment_id(n, 0) for n in (3, 4, 5)]
    assert await services.stream_store.get_head(SCOPE, "st") == {3: 0, 4: 0, 5: 0}
    for number in (3, 4, 5):
        record, sealed = (await services.stream_store.get_segment(SCOPE, "st", number)).value
        assert (record.number, sealed) == (number, None)
        info = await services.segment_store.get_segment_info(qualified_segment_name(SCOPE, "st", number))
        assert info.length == 0
    with pytest.raises(NotFound):
        await services.stream_store.get_segment(SCOPE, "st", 0)

    # Only that name is affected: another stream in the scope starts at 0.
    await services.streams.create_stream(SCOPE, "other", StreamConfig(ScalingPolicy.fixed(2)))
    _, other = await services.stream_store.get_active_epoch(SCOPE, "other")
    assert [s.number for s in other.sorted_segments()] == [0, 1]


async def test_creating_an_existing_stream_returns_what_is_stored(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    now = services.clock.now_ms()  # an old creation time would be finished by the creation sweep
    first = await services.stream_store.create_stream_metadata(SCOPE, "st", CONFIG, now)
    other_config = StreamConfig(ScalingPolicy.fixed(5))

    again = await services.stream_store.create_stream_metadata(SCOPE, "st", other_config, now + 1000)
    assert again.created is False
    assert again.config == CONFIG
    assert again.creation_time == now
    assert again.state == StreamState.CREATING
    assert again.epoch_zero == first.epoch_zero

    # After activation the state read back follows the stored one.
    version = (await services.stream_store.get_state(SCOPE, "st")).version
    await services.stream_store.activate_created_stream(SCOPE, "st", version, index_tags=True)
    third = await services.stream_store.create_stream_metadata(SCOPE, "st", other_config, now + 2000)
    assert (third.created, third.state, third.config) == (False, StreamState.ACTIVE, CONFIG)
    assert await services.stream_store.list_streams_for_tag(SCOPE, "a", "", 10) == ["st"]
    stored = await services.stream_store.get_config(SCOPE, "st")
    assert (stored.value, stored.version) == (CONFIG, 0)


async def test_creation_in_a_missing_scope_is_not_found(services: Services) -> None:
    with pytest.raises(NotFound):
        await services.stream_store.create_stream_metadata("nosuchscope", "st", CONFIG, 1)
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 0


async def test_creation_in_a_deleting_scope_is_not_found(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    version = (await services.scope_store.get_scope(SCOPE)).version
    await services.scope_store.set_scope_state(SCOPE, ScopeState.DELETING, version)
    assert await services.scope_store.get_scope_state(SCOPE) == ScopeState.DELETING

    with pytest.raises(NotFound):
        await services.stream_store.create_stream_metadata(SCOPE, "st", CONFIG, 1)
    assert not await services.stream_store.stream_exists(SCOPE, "st")
    outcome = await services.streams.create_stream(SCOPE, "st", CONFIG)
    assert outcome == CreateStreamOutcome.SCOPE_NOT_FOUND


async def test_scope_with_streams_is_not_deleted(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    await services.stream_store.create_stream_metadata(SCOPE, "st", CONFIG, 1)

    with pytest.raises(NotEmpty):
        await services.scope_store.delete_scope(SCOPE)
    assert await services.scopes.delete_scope(SCOPE) == ScopeOutcome.NOT_EMPTY
    assert await services.scope_store.get_scope_state(SCOPE) == ScopeState.ACTIVE

    # An empty scope is deleted; a missing one is NotFound.
    await services.scopes.create_scope("empty")
    await services.scope_store.delete_scope("empty")
    assert await services.scope_store.list_scopes("", 10) == [SCOPE]
    with pytest.raises(NotFound):
        await services.scope_store.delete_scope("empty")


async def test_list_streams_pages_by_name(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    await services.scopes.create_scope("elsewhere")
    for name in ("c", "a", "e", "b", "d"):
        await services.stream_store.create_stream_metadata(SCOPE, name, CONFIG, 1)
    await services.stream_store.create_stream_metadata("elsewhere", "aa", CONFIG, 1)
    store = services.stream_store

    assert await store.list_streams(SCOPE, "", 2) == ["a", "b"]
    assert await store.list_streams(SCOPE, "b", 2) == ["c", "d"]
    assert await store.list_streams(SCOPE, "d", 2) == ["e"]
    assert await store.list_streams(SCOPE, "e", 2) == []
    assert await store.list_streams(SCOPE, "", 100) == ["a", "b", "c", "d", "e"]
    # `after` need not be an existing name.
    assert await store.list_streams(SCOPE, "bb", 100) == ["c", "d", "e"]
    assert await store.list_streams("elsewhere", "", 100) == ["aa"]

    await services.scopes.create_scope("empty")
    assert await store.list_streams("empty", "", 10) == []
    with pytest.raises(NotFound):
        await store.list_streams("nosuchscope", "", 10)


async def test_unreachable_database_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable):
        await create_pool("postgresql://pgcontroller@127.0.0.1:1/x", min_size=1, max_size=1)


async def test_a_session_ended_by_the_server_mid_query_is_store_unavailable(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    async with services.pool.acquire() as holder, holder.transaction():
        # Park a store query behind a lock, then end its session as a restart or failover would.
        await holder.execute("LOCK TABLE scopes IN ACCESS EXCLUSIVE MODE")
        query = asyncio.ensure_future(services.scope_store.get_scope_state(SCOPE))
        try:
            pid = None
            for _ in range(500):
                await holder.execute("SELECT pg_stat_clear_snapshot()")
                pid = await holder.fetchval(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
                if pid is not None:
                    break
                await asyncio.sleep(0.01)
            assert pid is not None, "the query never waited on the lock"
            assert await holder.fetchval("SELECT pg_terminate_backend($1)", pid) is True
        finally:
            result = await asyncio.gather(query, return_exceptions=True)
    assert isinstance(result[0], StoreUnavailable), result


async def test_queries_over_a_closed_pool_are_store_unavailable(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        scopes, streams = PgScopeStore(pool), PgStreamStore(pool)
        await scopes.create_scope(SCOPE, 1)
        assert await streams.list_streams(SCOPE, "", 10) == []
    finally:
        await pool.close()
    with pytest.raises(StoreUnavailable):
        await scopes.get_scope_state(SCOPE)
    with pytest.raises(StoreUnavailable):
        await streams.get_state(SCOPE, "st")


async def test_conditional_writes_on_missing_sub_records_are_not_found(services: Services) -> None:
    """A missing segment or shard of an existing stream is NotFound, never a retryable conflict."""
    await services.scopes.create_scope("sc")
    await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    with pytest.raises(NotFound):
        await services.stream_store.set_segment_sealed_epoch("sc", "s", segment_id(9, 0), 1, 0)
    with pytest.raises(NotFound):
        await services.stream_store.put_sealed_size_shard("sc", "s", 3, {1: 2}, 0)
