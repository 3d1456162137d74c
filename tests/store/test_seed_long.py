"""The one long stream of `pgcontroller dev seed --one-stream-epochs` (app/dev/long_history.py):
its rows are those the controller's own scale workflow writes for the same scales, an
interrupted run resumes to the same rows as an uninterrupted one, and the command reports it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.dev.history_gen import SeedSpec
from app.dev.long_history import LongStreamGrower, ReplacementHistory, seed_long_stream
from app.dev.seed import SeedProgress
from app.domain.errors import AlreadyExists
from app.domain.ids import qualified_segment_name
from app.domain.records import SEALED_SIZE_SHARD_EPOCHS
from app.testing.controller import running_controller
from app.testing.history_seed import seed_replacement_history
from app.testing.scale import scale_request
from tests.api.conftest import served
from tests.store.test_seed import run_cli
from tests.support.db import clone_database, drop_database, with_database

END = 1_800_000_000_000  # fixed, so every run seeds the same history
SPEC = SeedSpec(streams=1, epochs_per_stream=1, start_ms=END - 86_400_000, span_ms=86_400_000)


async def dump(conn: Any, scope: str, name: str) -> dict[str, Any]:
    """A stream's scale-made rows, times relative to epoch 0's and without its database id."""
    sid, t0 = await conn.fetchrow(
        "SELECT s.id, e.creation_time FROM streams s JOIN epochs e ON e.stream_id = s.id AND e.epoch = 0"
        " WHERE s.scope = $1 AND s.name = $2",
        scope,
        name,
    )
    epochs = await conn.fetch(
        "SELECT epoch, reference_epoch, creation_time - $2 AS t, splits, merges, segment_ids, key_starts,"
        " key_ends, (SELECT array_agg(x - $2 ORDER BY o) FROM unnest(segment_creation_times)"
        " WITH ORDINALITY AS u(x, o)) AS times, sealed_segments, created_segments"
        " FROM epochs WHERE stream_id = $1 ORDER BY epoch",
        sid,
        t0,
    )
    segments = await conn.fetch(
        "SELECT segment_id, number, creation_epoch, creation_time - $2 AS t, key_start, key_end,"
        " sealed_epoch, version FROM segments WHERE stream_id = $1 ORDER BY segment_id",
        sid,
        t0,
    )
    shards = await conn.fetch(
        "SELECT shard, sizes, version FROM sealed_size_shards WHERE stream_id = $1 ORDER BY shard", sid
    )
    pointers = await conn.fetchrow(
        "SELECT c.epoch, c.version AS pointer, s.state, s.version AS state_version,"
        " x.active_epoch, x.version AS transition FROM stream_current_epochs c"
        " JOIN stream_states s USING (stream_id) JOIN stream_epoch_transitions x USING (stream_id)"
        " WHERE c.stream_id = $1",
        sid,
    )
    return {
        "epochs": [tuple(r) for r in epochs],
        "segments": [tuple(r) for r in segments],
        "shards": [(r["shard"], sorted(json.loads(r["sizes"])), r["version"]) for r in shards],
        "sizes": {k: v for r in shards for k, v in json.loads(r["sizes"]).items()},
        "pointers": tuple(pointers),
    }


async def scaled_through_the_controller(db_url: str, scope: str, name: str, epochs: int) -> None:
    """`epochs` real manual scales, each replacing one segment as the seeder's pattern does, at
    the times it gives (one ms apart)."""
    async with running_controller(db_url) as services, served(services) as stub:
        await stub.createScope(pb.ScopeInfo(scope=scope))
        info = pb.StreamInfo(scope=scope, stream=name)
        for stream in (name, f"{name}-seeded"):
            created = await stub.createStream(
                pb.StreamConfig(
                    streamInfo=pb.StreamInfo(scope=scope, stream=stream),
                    scalingPolicy=pb.ScalingPolicy(minNumSegments=2),
                )
            )
            assert created.status == pb.CreateStreamStatus.SUCCESS
        conn = await asyncpg.connect(db_url)
        try:
            history, current, _ = await LongStreamGrower(conn).load(scope, name, lambda _t0: 1)
        finally:
            await conn.close()
        assert current == 0
        low_start, middle, high_end = history.bounds
        for epoch in range(1, epochs + 1):
            sealed = history.sealed_by(epoch)
            key_range = (low_start, middle) if (epoch - 1) % 2 == 0 else (middle, high_end)
            reply = await stub.scale(
                scale_request(info, [sealed], [key_range], timestamp=history.time_of(epoch))
            )
            assert reply.status == pb.ScaleResponse.STARTED, reply
            for _ in range(2_000):
                status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=reply.epoch))
                if status.status == pb.ScaleStatusResponse.SUCCESS:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"scale to epoch {epoch} did not finish")
        # The workflow empties the transition and returns to ACTIVE after moving the pointer.
        conn = await asyncpg.connect(db_url)
        try:
            for _ in range(2_000):
                row = await conn.fetchrow(
                    "SELECT st.state, x.active_epoch FROM streams s"
                    " JOIN stream_states st ON st.stream_id = s.id"
                    " JOIN stream_epoch_transitions x ON x.stream_id = s.id"
                    " WHERE s.scope = $1 AND s.name = $2",
                    scope,
                    name,
                )
                if row["state"] == "ACTIVE" and row["active_epoch"] == -1:
                    break
                await asyncio.sleep(0.01)
        finally:
            await conn.close()


async def test_the_grown_rows_are_the_controllers_own(db_url: str) -> None:
    """Seven real scales through the controller (over shards 0 only, and the two epoch-0
    segments sealed in epochs 1 and 2) against the same seven grown in PostgreSQL."""
    scope, name, epochs = "long", "real", 7
    await scaled_through_the_controller(db_url, scope, name, epochs)
    conn = await asyncpg.connect(db_url)
    try:
        seeded = await seed_replacement_history(conn, scope, f"{name}-seeded", epochs)
        real, grown = await dump(conn, scope, name), await dump(conn, scope, f"{name}-seeded")
    finally:
        await conn.close()
    assert seeded.epochs == epochs
    for part in ("epochs", "segments", "shards", "pointers"):
        assert grown[part] == real[part], part
    # The controller's sizes are what its (empty) segments held; the seeder's follow its formula.
    assert set(real["sizes"]) == set(grown["sizes"]) and set(real["sizes"].values()) == {0}
    assert all(size > 0 for size in grown["sizes"].values())


@asynccontextmanager
async def second_database(pg_admin_url: str) -> AsyncIterator[str]:
    name = await clone_database(pg_admin_url)
    try:
        yield with_database(pg_admin_url, name)
    finally:
        await drop_database(pg_admin_url, name)


class Interrupted(Exception):
    pass


async def test_an_interrupted_run_resumes_to_the_same_rows(db_url: str, pg_admin_url: str) -> None:
    """2,500 epochs cross two shard boundaries; chunks of 700 commit one by one, so an interruption
    after the second leaves epoch 1,400 current, and --resume grows on to what one run writes."""
    epochs = 2_500

    def stop_after_two(progress: SeedProgress) -> None:
        if progress.epochs_done > 1_400:
            raise Interrupted

    with pytest.raises(Interrupted):
        await seed_long_stream(db_url, SPEC, epochs, chunk_epochs=700, progress=stop_after_two)
    conn = await asyncpg.connect(db_url)
    try:
        current = await conn.fetchval(
            "SELECT c.epoch FROM stream_current_epochs c JOIN streams s ON s.id = c.stream_id"
            " WHERE s.scope = 'seed0' AND s.name = 'stream0'"
        )
        assert current == 1_400
        with pytest.raises(AlreadyExists, match="resume grows it on"):
            await seed_long_stream(db_url, SPEC, epochs, chunk_epochs=700)
        summary = await seed_long_stream(db_url, SPEC, epochs, chunk_epochs=700, resume=True)
        assert (summary.streams, summary.skipped, summary.epochs) == (0, 1, epochs - 1_401)
        resumed = await dump(conn, "seed0", "stream0")
        store = await conn.fetch("SELECT name, length, created_at FROM embedded_segments ORDER BY name")
    finally:
        await conn.close()
    async with second_database(pg_admin_url) as other:
        whole = await seed_long_stream(other, SPEC, epochs)
        assert (whole.streams, whole.epochs, whole.rows["epochs"]) == (1, epochs, epochs + 1)
        conn = await asyncpg.connect(other)
        try:
            once = await dump(conn, "seed0", "stream0")
            store_once = await conn.fetch(
                "SELECT name, length, created_at FROM embedded_segments ORDER BY name"
            )
        finally:
            await conn.close()
    assert resumed == once
    assert [tuple(r) for r in store] == [tuple(r) for r in store_once]
    check_pattern(once, epochs, step=once["epochs"][1][2])
    # The store holds the two active segments (numbers from 2, one a epoch) and the mark stream's.
    assert {r["name"] for r in store} == {
        "seed0/_MARKstream0/0.#epoch.0",
        qualified_segment_name("seed0", "stream0", ((epochs - 2) << 32) | (epochs - 1)),
        qualified_segment_name("seed0", "stream0", ((epochs - 1) << 32) | epochs),
    }


def check_pattern(rows: dict[str, Any], epochs: int, step: int) -> None:
    """Independent of the SQL: every epoch, segment and shard the pattern implies."""
    h = ReplacementHistory(0, 0, 1, 0, 0, 0, step, (0.0, 0.5, 1.0))
    assert [r[0] for r in rows["epochs"]] == list(range(epochs))
    for e, ref, t, splits, merges, ids, _ks, _ke, times, sealed, created in rows["epochs"][1:]:
        assert (ref, t, splits, merges) == (e, e * step, 0, 0)
        assert tuple(ids) == h.active(e) and sealed == [h.sealed_by(e)] and created == [h.segment(e)]
        assert times == [h.creation_time(s) for s in ids]
    segments = {r[0]: r for r in rows["segments"]}
    assert len(segments) == epochs + 1
    for e in range(1, epochs):
        assert segments[h.sealed_by(e)][6:] == (e, 1)
    for s in h.active(epochs - 1):
        assert segments[s][6:] == (None, 0)
    sealed_ids = {str(h.sealed_by(e)) for e in range(1, epochs)}
    assert set(rows["sizes"]) == sealed_ids
    for shard, keys, version in rows["shards"]:
        assert all((int(k) >> 32) // SEALED_SIZE_SHARD_EPOCHS == shard for k in keys)
        assert version == len(keys) - 1
    assert rows["pointers"] == (epochs - 1, epochs - 1, "ACTIVE", 1 + 2 * (epochs - 1), -1, 2 * (epochs - 1))


async def test_the_command_grows_one_stream(db_url: str) -> None:
    code, out, err = await run_cli(
        "--db-url", db_url, "--one-stream-epochs", "3000", "--chunk-epochs", "1000"
    )
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["streams"], summary["epochs"], summary["rows"]["epochs"]) == (1, 3000, 3001)
    assert "seeded 1/1 streams, 3,000/3,000 epochs" in err
    code, _, err = await run_cli("--db-url", db_url, "--one-stream-epochs", "3000")
    assert code == 1 and "exists already" in err
    code, _, err = await run_cli(
        "--db-url", db_url, "--one-stream-epochs", "3000", "--epochs-per-stream", "5"
    )
    assert code == 2 and "no other epoch count" in err
    code, _, err = await run_cli("--db-url", db_url, "--one-stream-epochs", "3000", "--streams", "2")
    assert code == 2 and "not allowed with argument" in err
    code, _, err = await run_cli(
        "--db-url", db_url, "--one-stream-epochs", "100000", "--span-hours", "0.01", "--stream-prefix", "x"
    )
    assert code == 1 and "do not fit in the span" in err
