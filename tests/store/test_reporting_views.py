"""The reporting views against a realistic history made by the real services and workers: splits,
merges, a repartition, a rolling transaction, commits in place, an abort and a timeout, two
truncations, retention cuts, a subscriber, writer marks, a sealed and a deleted stream.

Each view is read as an analyst and compared with what the test itself did (bytes written per
segment, the cuts it truncated at, times taken around each call) and with hand-written SQL over
the base tables read by the controller's role. Also: the README documents exactly the views'
columns and types, and every big view has an index path for its partition and time columns.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.ids import qualified_segment_name, segment_id, transaction_segment_name
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfig,
)
from app.domain.txns import Outcome, PingStatus, TxnId, TxnStatus
from app.services.retention import RetentionService
from app.services.scaling import CheckScaleOutcome
from app.store.analysts import AnalystLimits, create_analyst
from app.store.retention import PgRetentionStore
from app.testing.clock import ManualClock
from app.testing.controller import Services, running_controller
from tests.support.db import clone_database, drop_database, with_database

SC = "rep"
MAIN = "main"
OTHER = "other"
GONE = "gone"
EMPTY_SCOPE = "repempty"
TAGS = ("alpha", "beta")
LEASE = 20_000
PASSWORD = "analyst-password-for-the-views"
README = Path(__file__).resolve().parents[2] / "sql" / "reporting" / "README.md"
REPORTING_DIR = README.parent
FREQUENCY = 1_800_000
# Large enough that no retention cycle here truncates: cuts are recorded, nothing is trimmed.
RETENTION_MIN = 10**12
# A maximum must not be below the minimum (validation refuses such a policy).
RETENTION_MAX = 2 * RETENTION_MIN


def sid(number: int, epoch: int) -> int:
    return segment_id(number, epoch)


@dataclass
class TxnFacts:
    txn: TxnId
    epoch: int
    lease_ms: int
    created: tuple[int, int]  # bounds (ms) around the create call
    requested: tuple[int, int] | None = None  # bounds around the commit/abort call
    outcome: str | None = None
    status: str = "OPEN"  # while active
    writer: tuple[str, int] | None = None
    timed_out: bool = False
    parents: list[int] = field(default_factory=list)  # the segment ids its writes went to


@dataclass
class History:
    url: str  # the controller's role
    analyst_url: str
    written: dict[int, int] = field(default_factory=dict)  # bytes per segment of MAIN, by id
    txns: dict[str, TxnFacts] = field(default_factory=dict)
    cut1: dict[int, int] = field(default_factory=dict)
    cut2: dict[int, int] = field(default_factory=dict)
    scale_times: list[tuple[int, int]] = field(default_factory=list)  # bounds around each epoch write
    retention_cuts: list[tuple[int, int]] = field(default_factory=list)  # (recording time, size)
    truncation_times: list[tuple[int, int]] = field(default_factory=list)  # bounds around each truncation
    subscriber_id: uuid.UUID = field(default_factory=uuid.uuid4)
    counts: dict[str, int] = field(default_factory=dict)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Builder:
    """Drives the services and keeps the ledger the views are checked against."""

    def __init__(self, s: Services, history: History) -> None:
        self.s = s
        self.h = history

    async def write(self, segment: int, size: int) -> None:
        await self.s.segment_store.append(qualified_segment_name(SC, MAIN, segment), size)
        self.h.written[segment] = self.h.written.get(segment, 0) + size

    async def scale(self, sealed: list[int], ranges: list[tuple[float, float]], stream: str = MAIN) -> None:
        _state, active = await self.s.stream_store.get_active_epoch(SC, stream)
        before = now_ms()
        outcome = await self.s.lifecycle.scaling.scale(SC, stream, sealed, ranges, 0)
        assert outcome.status.value == "STARTED", outcome

        async def done() -> bool:
            result = await self.s.lifecycle.scaling.check_scale(SC, stream, active.epoch)
            return bool(result is CheckScaleOutcome.SUCCESS)

        await eventually(done, f"scale of {stream} from epoch {active.epoch}")
        if stream == MAIN:
            self.h.scale_times.append((before, now_ms()))

    async def create_txn(self, key: str, lease_ms: int = LEASE) -> TxnFacts:
        before = now_ms()
        created = await self.s.transactions.create(SC, MAIN, lease_ms)
        facts = TxnFacts(created.txn, created.txn.high >> 32, lease_ms, (before, now_ms()))
        facts.parents = [p.id for p in created.segments]
        self.h.txns[key] = facts
        return facts

    async def write_txn(self, facts: TxnFacts, size: int) -> list[int]:
        parents = facts.parents
        for parent in parents:
            name = transaction_segment_name(
                qualified_segment_name(SC, MAIN, parent), facts.txn.high, facts.txn.low
            )
            await self.s.segment_store.append(name, size)
        return parents

    async def finish(self, facts: TxnFacts, outcome: str, writer: tuple[str, int] | None = None) -> None:
        before = now_ms()
        if outcome == "COMMITTED":
            if writer is None:
                answer = await self.s.transactions.commit(SC, MAIN, facts.txn)
            else:
                answer = await self.s.transactions.commit(SC, MAIN, facts.txn, writer[0], writer[1])
        else:
            answer = await self.s.transactions.abort(SC, MAIN, facts.txn)
        assert answer is Outcome.SUCCESS
        facts.requested = (before, now_ms())
        facts.outcome = outcome
        facts.writer = writer
        await self.wait_for(facts, outcome)

    async def wait_for(self, facts: TxnFacts, outcome: str) -> None:
        async def completed() -> bool:
            return bool(await self.s.transactions.state(SC, MAIN, facts.txn) is TxnStatus(outcome))

        await eventually(completed, f"transaction {facts.txn} {outcome}")

    async def truncate(self, cut: dict[int, int]) -> None:
        before = now_ms()
        outcome = await self.s.lifecycle.truncation.truncate_stream(SC, MAIN, cut)
        assert outcome.value == "SUCCESS", outcome
        self.h.truncation_times.append((before, now_ms()))


async def build_history(s: Services, history: History) -> None:
    b = Builder(s, history)
    await s.scopes.create_scope(SC)
    await s.scopes.create_scope(EMPTY_SCOPE)
    policy = RetentionPolicy(RetentionType.SIZE, RETENTION_MIN, RETENTION_MAX)
    await s.streams.create_stream(SC, MAIN, StreamConfig(ScalingPolicy.fixed(2), policy, TAGS, 0, 4096))
    await b.write(0, 50)
    await b.write(1, 70)
    # Epoch 1: a split of segment 1.
    await b.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    await b.write(sid(2, 1), 5)
    await b.write(sid(3, 1), 6)
    await b.write(0, 10)
    history.cut1 = {0: 20, sid(2, 1): 0, sid(3, 1): 0}
    await b.truncate(history.cut1)
    # A transaction on epoch 1, committed after the stream moved on: it rolls (epochs 3 and 4).
    t1 = await b.create_txn("rolled")
    for parent in await b.write_txn(t1, 10):
        history.written[sid(parent & 0xFFFFFFFF, 3)] = 10
    # Epoch 2: a merge of the two halves.
    await b.scale([sid(2, 1), sid(3, 1)], [(0.5, 1.0)])
    await b.write(sid(4, 2), 7)
    await b.finish(t1, "COMMITTED", writer=("txn-writer", 1234))
    for copy in (sid(0, 4), sid(4, 4)):
        history.written[copy] = 0
    # Epoch 5: a repartition (one split and one merge at once).
    await b.scale([sid(0, 4), sid(4, 4)], [(0.0, 0.3), (0.3, 1.0)])
    await b.write(sid(5, 5), 11)
    await b.write(sid(6, 5), 13)
    t2 = await b.create_txn("in place")
    for parent in await b.write_txn(t2, 3):
        history.written[parent] += 3
    await b.finish(t2, "COMMITTED")
    t3 = await b.create_txn("aborted")
    await b.finish(t3, "ABORTED")
    t5 = await b.create_txn("timed out", lease_ms=50)
    t5.outcome, t5.timed_out = "ABORTED", True
    await b.wait_for(t5, "ABORTED")
    t4 = await b.create_txn("open")
    assert await s.transactions.ping(SC, MAIN, t4.txn, 25_000) is PingStatus.OK
    t4.lease_ms = 25_000
    history.cut2 = {sid(5, 5): 4, sid(6, 5): 2}
    await b.truncate(history.cut2)

    # Two retention cuts, on a clock of the test's own, fenced by the bucket's current claim.
    generation = await s.pool.fetchval(
        "SELECT generation FROM bucket_owners "
        "WHERE service = 'retention' AND bucket = 0 AND owner IS NOT NULL"
    )
    fence = Fence(BucketService.RETENTION, 0, generation)
    clock = ManualClock(now_ms())
    retention = RetentionService(
        s.stream_store, PgRetentionStore(s.pool), s.segment_store, clock, frequency_ms=FREQUENCY
    )
    for extra in (0, 9):
        if extra:
            await b.write(sid(5, 5), extra)
        outcome = await retention.run_cycle(SC, MAIN, fence)
        assert outcome.skipped is None and not outcome.fenced, outcome
        history.retention_cuts.append((clock.now, sum(history.written.values())))
        clock.now += FREQUENCY + 1
    await s.subscribers.add_subscriber(SC, MAIN, f"{SC}/rg1", history.subscriber_id, 1)
    assert (
        await s.watermarks.note_timestamp(SC, MAIN, "w1", {sid(5, 5): 14, sid(6, 5): 16}, 1000)
    ).value == "SUCCESS"

    # A stream that scales by rate, replaces its segment by one of the same range (neither split
    # nor merge) and is sealed; one created, used, sealed and deleted.
    await s.streams.create_stream(
        SC, OTHER, StreamConfig(ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 1))
    )
    await b.scale([0], [(0.0, 1.0)], stream=OTHER)
    assert (await s.lifecycle.sealing.seal_stream(SC, OTHER)).value == "SUCCESS"
    await s.streams.create_stream(SC, GONE, StreamConfig(ScalingPolicy.fixed(1)))
    gone_txn = (await s.transactions.create(SC, GONE, LEASE)).txn
    assert await s.transactions.commit(SC, GONE, gone_txn) is Outcome.SUCCESS

    async def gone_committed() -> bool:
        return bool(await s.transactions.state(SC, GONE, gone_txn) is TxnStatus.COMMITTED)

    await eventually(gone_committed, "the deleted stream's transaction")
    history.counts["details_before_delete"] = await s.pool.fetchval(
        "SELECT count(*) FROM completed_txn_details"
    )
    assert (await s.lifecycle.sealing.seal_stream(SC, GONE)).value == "SUCCESS"
    assert (await s.lifecycle.deletion.delete_stream(SC, GONE)).value == "SUCCESS"


@pytest.fixture(scope="module")
async def history(pg_admin_url: str) -> AsyncIterator[History]:
    name = await clone_database(pg_admin_url)
    url = with_database(pg_admin_url, name)
    analyst = f"views_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(url)
    analyst_url = f"postgresql://{analyst}:{PASSWORD}@{parts.hostname}:{parts.port}{parts.path}"
    try:
        h = History(url, analyst_url)
        async with running_controller(url) as s:
            await build_history(s, h)
        # Workers have stopped: the database holds still while the views are read. Two more
        # transactions stay COMMITTING and ABORTING, their requests queued with nobody to run them.
        async with running_controller(url, workers=False) as s:
            b = Builder(s, h)
            for key, move in (("committing", "COMMITTING"), ("aborting", "ABORTING")):
                facts = await b.create_txn(key)
                before = now_ms()
                if move == "COMMITTING":
                    assert (
                        await s.transactions.commit(SC, MAIN, facts.txn, "late-writer", 77) is Outcome.SUCCESS
                    )
                    facts.writer = ("late-writer", 77)
                else:
                    assert await s.transactions.abort(SC, MAIN, facts.txn) is Outcome.SUCCESS
                facts.requested, facts.status = (before, now_ms()), move
        await create_analyst(url, analyst, PASSWORD, AnalystLimits(60_000, 5))
        yield h
    finally:
        await drop_database(pg_admin_url, name)
        conn = await asyncpg.connect(pg_admin_url)
        try:
            await conn.execute(f'DROP ROLE IF EXISTS "{analyst}"')
        finally:
            await conn.close()


async def fetch(url: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
        return [dict(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def view(h: History, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Read as the analyst: what the views give is what an analyst gets."""
    return await fetch(h.analyst_url, sql, *args)


async def base(h: History, sql: str, *args: Any) -> list[dict[str, Any]]:
    return await fetch(h.url, sql, *args)


def sealed_ids(h: History) -> set[int]:
    return {
        sid(n, e) for n, e in [(1, 0), (0, 0), (2, 1), (3, 1), (4, 2), (0, 3), (2, 3), (3, 3), (0, 4), (4, 4)]
    }


# --- streams and scopes ------------------------------------------------------------------------


async def test_streams(history: History) -> None:
    h = history
    rows = {r["stream"]: r for r in await view(h, "SELECT * FROM streams WHERE scope = $1", SC)}
    # Every stream has its internal mark stream (_MARK<stream>).
    assert {name: row["internal"] for name, row in rows.items()} == {
        MAIN: False,
        OTHER: False,
        f"_MARK{MAIN}": True,
        f"_MARK{OTHER}": True,
    }, "the deleted stream is gone from the views"
    main = rows[MAIN]
    counts = (await base(h, "SELECT * FROM cluster_settings"))[0]
    assert main["stream_id"] == (await base(h, "SELECT id FROM streams WHERE name = $1", MAIN))[0]["id"]
    assert (main["state"], main["scale_type"], main["min_num_segments"]) == (
        "ACTIVE",
        "FIXED_NUM_SEGMENTS",
        2,
    )
    assert (main["retention_type"], main["retention_min"], main["retention_max"]) == (
        "SIZE",
        RETENTION_MIN,
        RETENTION_MAX,
    )
    assert (main["tags"], main["rollover_size_bytes"], main["config_updating"]) == (list(TAGS), 4096, False)
    assert (main["current_epoch"], main["current_reference_epoch"], main["segment_count"]) == (5, 5, 2)
    assert (main["latest_epoch"], main["scale_in_progress"]) == (5, False)
    assert main["segments_created"] == len(h.written) == 12
    assert main["segments_sealed"] == len(sealed_ids(h))
    assert main["sealed_bytes"] == sum(h.written[s] for s in sealed_ids(h)) == 178
    assert main["truncated_bytes"] == 178 + 4 + 2
    assert main["head_stream_cut"] == {str(k): v for k, v in h.cut2.items()}
    assert main["truncation_in_progress"] is False
    assert (main["last_retention_cut_time"], main["last_retention_cut_size_bytes"]) == h.retention_cuts[-1]
    assert main["request_bucket"] == stream_bucket(SC, MAIN, counts["request_buckets"])
    assert main["retention_bucket"] == stream_bucket(SC, MAIN, counts["retention_buckets"])
    assert main["watermark_bucket"] == stream_bucket(SC, MAIN, counts["watermark_buckets"])
    first, last = h.scale_times[-1]
    assert first <= main["current_epoch_time"] <= last

    other = rows[OTHER]
    assert (other["state"], other["scale_type"], other["target_rate"], other["scale_factor"]) == (
        "SEALED",
        "BY_RATE_IN_EVENTS_PER_SEC",
        100,
        2,
    )
    assert (other["retention_type"], other["retention_min"], other["tags"]) == (None, None, [])
    assert (other["current_epoch"], other["segments_created"], other["segments_sealed"]) == (1, 2, 1)
    assert (other["sealed_bytes"], other["truncated_bytes"]) == (0, 0)
    # Never truncated: the head is epoch 0's segments at offset 0 (as getSegments answers).
    assert other["head_stream_cut"] == {"0": 0}
    assert (other["last_retention_cut_time"], other["last_retention_cut_size_bytes"]) == (None, None)


async def test_streams_match_the_base_tables(history: History) -> None:
    h = history
    expected = await base(
        h,
        """
        SELECT s.id AS stream_id, st.state, ce.epoch AS current_epoch,
               cardinality(e.segment_ids) AS segment_count, e.creation_time AS current_epoch_time,
               c.tags, t.size_till AS truncated_bytes,
               (SELECT count(*) FROM segments g WHERE g.stream_id = s.id) AS segments_created,
               (SELECT COALESCE(sum((z.sizes ->> g.segment_id::text)::bigint), 0)::bigint
                FROM segments g JOIN sealed_size_shards z
                  ON z.stream_id = g.stream_id AND z.shard = g.creation_epoch / 1000
                WHERE g.stream_id = s.id AND g.sealed_epoch IS NOT NULL) AS sealed_bytes
        FROM streams s JOIN stream_states st ON st.stream_id = s.id
        JOIN stream_current_epochs ce ON ce.stream_id = s.id
        JOIN epochs e ON e.stream_id = s.id AND e.epoch = ce.epoch
        JOIN stream_configs c ON c.stream_id = s.id
        JOIN stream_truncations t ON t.stream_id = s.id
        ORDER BY s.id
        """,
    )
    got = await view(
        h,
        "SELECT stream_id, state, current_epoch, segment_count, current_epoch_time, tags, truncated_bytes, "
        "segments_created, sealed_bytes FROM streams ORDER BY stream_id",
    )
    assert got == expected


async def test_scopes(history: History) -> None:
    rows = await view(
        history,
        "SELECT scope, state, stream_count FROM scopes WHERE scope IN ($1, $2) ORDER BY 1",
        SC,
        EMPTY_SCOPE,
    )
    assert rows == [
        {"scope": SC, "state": "ACTIVE", "stream_count": 4},
        {"scope": EMPTY_SCOPE, "state": "ACTIVE", "stream_count": 0},
    ]
    assert await view(history, "SELECT scope, creation_time FROM scopes ORDER BY 1") == await base(
        history, "SELECT name AS scope, created_at AS creation_time FROM scopes ORDER BY 1"
    )


# --- scaling -----------------------------------------------------------------------------------


def overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and a[1] > b[0]


async def test_scale_events(history: History) -> None:
    h = history
    rows = await view(h, "SELECT * FROM scale_events WHERE stream = $1 ORDER BY epoch", MAIN)
    assert [(r["epoch"], r["reference_epoch"], r["kind"], r["splits"], r["merges"]) for r in rows] == [
        (1, 1, "split", 1, 0),
        (2, 2, "merge", 0, 1),
        (3, 1, "rolling", 0, 0),
        (4, 2, "rolling", 0, 0),
        (5, 5, "other", 1, 1),
    ]
    assert [(sorted(r["sealed_segments"]), sorted(r["created_segments"])) for r in rows] == [
        ([1], [sid(2, 1), sid(3, 1)]),
        ([sid(2, 1), sid(3, 1)], [sid(4, 2)]),
        # The rolling pair: the active epoch 2 is sealed into copies of the txn epoch 1 ...
        ([0, sid(4, 2)], [sid(0, 3), sid(2, 3), sid(3, 3)]),
        # ... which are sealed into copies of epoch 2, the new active epoch.
        ([sid(0, 3), sid(2, 3), sid(3, 3)], [sid(0, 4), sid(4, 4)]),
        ([sid(0, 4), sid(4, 4)], [sid(5, 5), sid(6, 5)]),
    ]
    assert [
        (r["sealed_count"], r["created_count"], r["segments_before"], r["segments_after"]) for r in rows
    ] == [
        (1, 2, 2, 3),
        (2, 1, 3, 2),
        (2, 3, 2, 3),
        (3, 2, 3, 2),
        (2, 2, 2, 2),
    ]
    times = [r["event_time"] for r in rows]
    assert times == sorted(times) and len(set(times)) == len(times)
    for row, (first, last) in zip([rows[0], rows[1], rows[4]], h.scale_times, strict=True):
        assert first <= row["event_time"] <= last
    epochs = await base(
        h,
        "SELECT e.epoch, e.creation_time FROM epochs e JOIN streams s ON s.id = e.stream_id "
        "WHERE s.name = $1 ORDER BY 1",
        MAIN,
    )
    assert [r["previous_epoch_duration_ms"] for r in rows] == [
        b["creation_time"] - a["creation_time"] for a, b in itertools.pairwise(epochs)
    ]
    # A segment replaced by one of the same range: neither a split nor a merge.
    (other,) = await view(h, "SELECT * FROM scale_events WHERE stream = $1", OTHER)
    assert (other["kind"], other["splits"], other["merges"]) == ("other", 0, 0)
    assert (other["sealed_segments"], other["created_segments"]) == ([0], [sid(1, 1)])


async def test_scale_events_match_the_segments_table(history: History) -> None:
    """Independently of the epoch records' history lists: a transition seals the segments whose
    sealed epoch it is, creates those whose creation epoch it is, and splits/merges by key range."""
    h = history
    segments = await base(
        h, "SELECT g.* FROM segments g JOIN streams s ON s.id = g.stream_id WHERE s.name = $1", MAIN
    )
    epochs = {
        r["epoch"]: r
        for r in await base(
            h, "SELECT e.* FROM epochs e JOIN streams s ON s.id = e.stream_id WHERE s.name = $1", MAIN
        )
    }
    rng = {g["segment_id"]: (g["key_start"], g["key_end"]) for g in segments}
    for row in await view(h, "SELECT * FROM scale_events WHERE stream = $1", MAIN):
        e = row["epoch"]
        sealed = sorted(g["segment_id"] for g in segments if g["sealed_epoch"] == e)
        created = sorted(g["segment_id"] for g in segments if g["creation_epoch"] == e)
        assert (sorted(row["sealed_segments"]), sorted(row["created_segments"])) == (sealed, created)
        assert row["event_time"] == epochs[e]["creation_time"]
        if epochs[e]["reference_epoch"] == e:
            splits = sum(1 for s in sealed if sum(overlaps(rng[s], rng[c]) for c in created) > 1)
            merges = sum(1 for c in created if sum(overlaps(rng[c], rng[s]) for s in sealed) > 1)
            assert (row["splits"], row["merges"]) == (splits, merges)


async def test_segments(history: History) -> None:
    h = history
    rows = {r["segment_id"]: r for r in await view(h, "SELECT * FROM segments WHERE stream = $1", MAIN)}
    assert set(rows) == set(h.written)
    epoch_times = {
        r["epoch"]: r["creation_time"]
        for r in await base(
            h,
            "SELECT e.epoch, e.creation_time FROM epochs e JOIN streams s ON s.id = e.stream_id "
            "WHERE s.name = $1",
            MAIN,
        )
    }
    record = (
        await base(
            h,
            "SELECT t.* FROM stream_truncations t JOIN streams s ON s.id = t.stream_id WHERE s.name = $1",
            MAIN,
        )
    )[0]
    deleted = set(record["deleted_segments"]) | (set() if record["updating"] else set(record["to_delete"]))
    assert deleted, "the truncations deleted segments"
    for segment, row in rows.items():
        epoch = segment >> 32
        assert (row["segment_number"], row["creation_epoch"]) == (segment & 0xFFFFFFFF, epoch)
        assert row["creation_time"] == epoch_times[epoch]
        assert row["rolling_copy"] is (epoch in (3, 4))
        assert row["deleted_by_truncation"] is (segment in deleted)
        if segment in sealed_ids(h):
            assert row["sealed_size_bytes"] == h.written[segment], segment
            assert row["sealed_time"] == epoch_times[row["sealed_epoch"]]
            assert row["lifetime_ms"] == row["sealed_time"] - row["creation_time"] > 0
        else:
            assert (
                row["sealed_epoch"],
                row["sealed_time"],
                row["sealed_size_bytes"],
                row["lifetime_ms"],
            ) == (
                None,
                None,
                None,
                None,
            )
    assert (rows[sid(2, 1)]["key_start"], rows[sid(2, 1)]["key_end"]) == (0.5, 0.75)
    assert rows[1]["sealed_epoch"] == 1 and rows[0]["sealed_epoch"] == 3
    others = {r["segment_id"]: r for r in await view(h, "SELECT * FROM segments WHERE stream = $1", OTHER)}
    assert set(others) == {0, sid(1, 1)}
    assert (others[0]["sealed_epoch"], others[0]["sealed_size_bytes"], others[sid(1, 1)]["sealed_epoch"]) == (
        1,
        0,
        None,
    )


# --- truncation and retention ------------------------------------------------------------------


async def test_truncations(history: History) -> None:
    h = history
    rows = {r["stream"]: r for r in await view(h, "SELECT * FROM truncations WHERE scope = $1", SC)}
    main = rows[MAIN]
    assert (main["truncated"], main["in_progress"], main["truncated_bytes"]) == (True, False, 184)
    assert main["stream_cut"] == {str(k): v for k, v in h.cut2.items()}
    assert main["deleting_segments"] == []
    record = (
        await base(
            h,
            "SELECT t.* FROM stream_truncations t JOIN streams s ON s.id = t.stream_id WHERE s.name = $1",
            MAIN,
        )
    )[0]
    assert main["span"] == record["span"]
    assert main["deleted_segments"] == sorted(set(record["deleted_segments"]) | set(record["to_delete"]))
    # The second truncation deleted every sealed segment it passed (the first one's is segment 1).
    assert set(main["deleted_segments"]) >= sealed_ids(h) - {1}
    assert (rows[OTHER]["truncated"], rows[OTHER]["truncated_bytes"], rows[OTHER]["deleted_segments"]) == (
        False,
        0,
        [],
    )


async def test_truncation_history(history: History) -> None:
    h = history
    rows = await view(h, "SELECT * FROM truncation_history WHERE scope = $1 ORDER BY truncation_id", SC)
    assert [r["stream"] for r in rows] == [MAIN, MAIN], "one row per completed truncation"
    first, second = rows
    assert [r["stream_cut"] for r in rows] == [
        {str(k): v for k, v in cut.items()} for cut in (h.cut1, h.cut2)
    ]
    for row, (before, after) in zip(rows, h.truncation_times, strict=True):
        assert before <= row["completion_time"] <= after
    # The first cut: 20 bytes of segment 0 and all of the sealed segment 1 (70 bytes).
    assert (first["truncated_bytes"], first["total_truncated_bytes"]) == (90, 90)
    assert (second["truncated_bytes"], second["total_truncated_bytes"]) == (184 - 90, 184)
    assert first["deleted_segments"] == [1] and first["deleted_count"] == 1
    assert set(second["deleted_segments"]).isdisjoint(first["deleted_segments"])
    assert second["deleted_count"] == len(second["deleted_segments"]) > 0
    (current,) = await view(h, "SELECT * FROM truncations WHERE stream = $1", MAIN)
    assert sorted(first["deleted_segments"] + second["deleted_segments"]) == current["deleted_segments"]
    assert sum(r["truncated_bytes"] for r in rows) == current["truncated_bytes"]


async def test_truncation_history_matches_the_base_table(history: History) -> None:
    by_view = await view(
        history,
        "SELECT stream_id, truncation_id, completion_time, truncated_bytes, deleted_segments "
        "FROM truncation_history ORDER BY truncation_id",
    )
    by_table = await base(
        history,
        "SELECT stream_id, id AS truncation_id, completed_at AS completion_time, truncated_bytes, "
        "deleted_segments FROM truncation_history ORDER BY id",
    )
    assert [dict(r) for r in by_view] == [dict(r) for r in by_table] and by_table


async def test_retention_set(history: History) -> None:
    h = history
    rows = await view(h, "SELECT * FROM retention_set WHERE stream = $1 ORDER BY recording_time", MAIN)
    assert [(r["recording_time"], r["recording_size_bytes"]) for r in rows] == h.retention_cuts
    assert [r["recording_size_bytes"] for r in rows] == [208, 217]
    assert rows[-1]["stream_cut"] == {str(sid(5, 5)): 23, str(sid(6, 5)): 16}
    assert await view(
        h,
        "SELECT stream_id, recording_time, recording_size_bytes, stream_cut FROM retention_set ORDER BY 1, 2",
    ) == await base(
        h,
        "SELECT stream_id, recording_time, recording_size AS recording_size_bytes, stream_cut "
        "FROM retention_set ORDER BY 1, 2",
    )


async def test_subscribers(history: History) -> None:
    rows = await view(history, "SELECT * FROM subscribers")
    assert [(r["stream"], r["subscriber"], r["reader_group_id"], r["generation"]) for r in rows] == [
        (MAIN, f"{SC}/rg1", history.subscriber_id, 1)
    ]
    assert rows[0]["truncation_stream_cut"] == {}


# --- transactions ------------------------------------------------------------------------------


async def test_transactions(history: History) -> None:
    h = history
    rows = await view(h, "SELECT * FROM transactions WHERE stream = $1", MAIN)
    by_id = {(r["txn_high"], r["txn_low"]): r for r in rows}
    assert len(rows) == len(by_id) == len(h.txns) == 7
    for key, facts in h.txns.items():
        row = by_id[(facts.txn.high, facts.txn.low)]
        assert row["txn_id"] == uuid.UUID(int=((facts.txn.high & (2**64 - 1)) << 64) | facts.txn.low), key
        assert (row["epoch"], row["lease_ms"]) == (facts.epoch, facts.lease_ms), key
        assert facts.created[0] <= row["creation_time"] <= facts.created[1], key
        assert row["lease_expiry"] >= row["creation_time"] + min(facts.lease_ms, LEASE), key
        assert row["outcome"] == facts.outcome, key
        assert (row["writer_id"], row["writer_time"]) == (facts.writer or (None, None)), key
        if facts.outcome is None:
            assert (
                row["status"],
                row["completion_time"],
                row["commit_latency_ms"],
                row["abort_latency_ms"],
            ) == (
                facts.status,
                None,
                None,
                None,
            ), key
            if facts.requested is None:
                assert (row["requested_at"], row["open_duration_ms"], row["timed_out"]) == (None, None, None)
            else:
                assert facts.requested[0] <= row["requested_at"] <= facts.requested[1], key
                assert row["open_duration_ms"] == row["requested_at"] - row["creation_time"]
                assert row["timed_out"] is (False if facts.status == "ABORTING" else None), key
            continue
        assert row["status"] == facts.outcome
        if facts.requested is not None:
            assert facts.requested[0] <= row["requested_at"] <= facts.requested[1], key
        assert row["completion_time"] >= row["requested_at"] >= row["creation_time"], key
        assert row["open_duration_ms"] == row["requested_at"] - row["creation_time"]
        latency = row["completion_time"] - row["requested_at"]
        if facts.outcome == "COMMITTED":
            assert (row["commit_latency_ms"], row["abort_latency_ms"], row["timed_out"]) == (
                latency,
                None,
                None,
            )
        else:
            assert (row["commit_latency_ms"], row["abort_latency_ms"]) == (None, latency)
            assert row["timed_out"] is facts.timed_out, key
    assert by_id[(h.txns["rolled"].txn.high, h.txns["rolled"].txn.low)]["epoch"] == 1
    assert by_id[(h.txns["in place"].txn.high, h.txns["in place"].txn.low)]["epoch"] == 5


async def test_transactions_match_the_base_tables(history: History) -> None:
    h = history
    expected = await base(
        h,
        """
        SELECT stream_id, txn_high, txn_low, status, NULL AS completion_time, creation_time FROM transactions
        UNION ALL
        SELECT c.stream_id, c.txn_high, c.txn_low, c.status, c.completion_time, d.creation_time
        FROM completed_txns c
        LEFT JOIN completed_txn_details d USING (stream_id, txn_high, txn_low)
        ORDER BY 1, 2, 3
        """,
    )
    got = await view(
        h,
        "SELECT stream_id, txn_high, txn_low, status, completion_time, creation_time "
        "FROM transactions ORDER BY 1, 2, 3",
    )
    assert got == expected
    # Details go with their completed records: the deleted stream's are gone.
    assert await base(h, "SELECT count(*) AS n FROM completed_txn_details") == [
        {"n": h.counts["details_before_delete"] - 1}
    ]
    assert await base(
        h,
        "SELECT count(*) AS n FROM completed_txn_details d "
        "LEFT JOIN completed_txns c USING (stream_id, txn_high, txn_low) WHERE c.stream_id IS NULL",
    ) == [{"n": 0}]


# --- cluster and watermarks --------------------------------------------------------------------


async def test_cluster_views(history: History) -> None:
    h = history
    assert await view(h, "SELECT * FROM cluster_settings") == await base(
        h,
        "SELECT request_buckets, retention_buckets, watermark_buckets, container_count, "
        "created_at AS creation_time FROM cluster_settings",
    )
    assert await view(h, "SELECT * FROM bucket_owners ORDER BY service, bucket") == await base(
        h,
        "SELECT service, bucket, assigned_to, owner, generation, claimed_at "
        "FROM bucket_owners ORDER BY service, bucket",
    )
    owners = await view(h, "SELECT * FROM bucket_owners")
    assert owners, "the controller claimed its buckets"
    assert await view(h, "SELECT * FROM containers ORDER BY container") == await base(
        h, "SELECT container, host, port FROM container_map ORDER BY container"
    )
    hosts = await view(h, "SELECT * FROM segment_store_hosts ORDER BY host, port")
    assert [(r["host"], r["port"]) for r in hosts] == [
        (r["host"], r["port"])
        for r in await base(h, "SELECT host, port FROM segment_store_hosts ORDER BY host, port")
    ]
    assert sum(r["container_count"] for r in hosts) == len(await view(h, "SELECT * FROM containers"))
    controllers = await view(h, "SELECT * FROM controllers")
    leader = await base(h, "SELECT controller_id, term FROM cluster_leader")
    assert [(r["controller_id"], r["leader_term"]) for r in controllers if r["is_leader"]] == [
        (r["controller_id"], r["term"])
        for r in leader
        if r["controller_id"] in {c["controller_id"] for c in controllers}
    ]


async def test_watermark_views(history: History) -> None:
    h = history
    marks = {r["writer"]: r for r in await view(h, "SELECT * FROM writer_marks WHERE stream = $1", MAIN)}
    assert set(marks) >= {"w1"}
    assert (marks["w1"]["mark_time"], marks["w1"]["position"], marks["w1"]["alive"]) == (
        1000,
        {str(sid(5, 5)): 14, str(sid(6, 5)): 16},
        True,
    )
    assert await view(
        h,
        "SELECT stream_id, writer, mark_time, position, alive, inactive_since "
        "FROM writer_marks ORDER BY 1, 2",
    ) == await base(
        h,
        "SELECT stream_id, writer, mark_time, position, alive, inactive_since "
        "FROM writer_marks ORDER BY 1, 2",
    )
    assert await view(
        h,
        "SELECT stream_id, seq, lower_time_bound, upper_time_bound, stream_cut, creation_time "
        "FROM watermarks ORDER BY 1, 2",
    ) == await base(
        h,
        "SELECT stream_id, seq, lower_time_bound, upper_time_bound, stream_cut, "
        "created_at AS creation_time FROM watermarks ORDER BY 1, 2",
    )


# --- the contract: documentation, access, cost -------------------------------------------------


def documented() -> dict[str, list[tuple[str, str, str]]]:
    """`### reporting.<view>` headings, each followed by `| column | type | unit | meaning |` rows."""
    views: dict[str, list[tuple[str, str, str]]] = {}
    current: str | None = None
    for line in README.read_text().splitlines():
        heading = re.fullmatch(r"### `?reporting\.(\w+)`?.*", line.strip())
        if heading:
            current = heading.group(1)
            views[current] = []
            continue
        if line.startswith("#"):
            current = None
        row = re.fullmatch(
            r"\|\s*`(\w+)`\s*\|\s*`?([^|`]+?)`?\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|", line.strip()
        )
        if current is not None and row:
            views[current].append((row.group(1), row.group(2), row.group(3)))
            assert row.group(4), f"reporting.{current}.{row.group(1)} has no meaning in the README"
    return views


async def test_the_readme_documents_every_view_and_column(history: History) -> None:
    actual: dict[str, list[tuple[str, str]]] = {}
    for r in await base(
        history,
        """
        SELECT c.relname AS view, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE n.nspname = 'reporting' AND c.relkind = 'v'
        ORDER BY c.relname, a.attnum
        """,
    ):
        actual.setdefault(r["view"], []).append((r["column"], r["type"]))
    docs = documented()
    assert sorted(docs) == sorted(actual), "every view is documented, and only existing ones"
    for name, columns in actual.items():
        assert [(c, t) for c, t, _unit in docs[name]] == columns, f"reporting.{name}"
        assert all(unit for _c, _t, unit in docs[name]), f"reporting.{name}: every column states its unit"


async def test_the_analyst_reads_what_the_owner_reads(history: History) -> None:
    names = [
        r["relname"]
        for r in await base(
            history,
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'reporting' AND c.relkind = 'v'",
        )
    ]
    assert len(names) >= 15
    for name in names:
        as_analyst = await view(history, f"SELECT * FROM reporting.{name}")
        as_owner = await base(history, f"SELECT * FROM reporting.{name}")
        assert sorted(map(repr, as_analyst)) == sorted(map(repr, as_owner)), name
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await view(history, "SELECT * FROM public.epochs")


# A partitioned JDBC read (a range of the partition column) and an incremental one (after a time)
# of each big view: with sequential scans priced out none may remain, and the read's predicate
# must be an index condition on a leading column (a range scan, not a whole-index walk).
RANGE = r"Index Cond: \(\((stream_id|id) >= 1\) AND \((stream_id|id) <= 2\)\)"
PARTITIONED_READS = [
    ("SELECT * FROM reporting.streams WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.segments WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.segments WHERE stream_id BETWEEN 1 AND 2 AND sealed_time > 1000", RANGE),
    ("SELECT * FROM reporting.scale_events WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.scale_events WHERE event_time > 1000", r"Index Scan (on|using) epochs_by_time"),
    ("SELECT * FROM reporting.transactions WHERE stream_id BETWEEN 1 AND 2", RANGE),
    (
        "SELECT * FROM reporting.transactions WHERE completion_time > 1000",
        r"Index Scan (on|using) completed_txns_for_gc",
    ),
    ("SELECT * FROM reporting.retention_set WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.truncations WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.truncation_history WHERE stream_id BETWEEN 1 AND 2", RANGE),
    (
        "SELECT * FROM reporting.truncation_history WHERE completion_time > 1000",
        r"Index Scan (on|using) truncation_history_by_time",
    ),
    ("SELECT * FROM reporting.watermarks WHERE stream_id BETWEEN 1 AND 2", RANGE),
    ("SELECT * FROM reporting.writer_marks WHERE stream_id BETWEEN 1 AND 2", RANGE),
]


@pytest.mark.parametrize(("sql", "index_path"), PARTITIONED_READS)
async def test_partitioned_and_incremental_reads_use_indexes(
    history: History, sql: str, index_path: str
) -> None:
    conn = await asyncpg.connect(history.url)
    try:
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {sql}"))
    finally:
        await conn.close()
    assert "Seq Scan" not in plan, plan
    assert re.search(index_path, plan), plan
