"""`pgcontroller dev seed` (app/dev/seed.py over app/dev/history_gen.py): a seeded history,
read back through the real stores and services, keeps every invariant the workflows keep and
replays through the domain's own scale, rolling-transaction and truncation rules; a running
controller serves it and its workflows carry on from it; a failed run leaves whole streams only.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import workers.handlers.common as workflow_common
from app.api.grpc.proto import controller_pb2 as pb
from app.dev.history_gen import (
    Rows,
    ScaleMix,
    SeedSpec,
    StreamHistory,
    StreamIds,
    StreamSlot,
    TxnMix,
    stream_slots,
)
from app.dev.seed import COLUMNS, seed_history
from app.domain.containers import java_string_hash
from app.domain.errors import AlreadyExists, IllegalState, InvalidInput
from app.domain.ids import epoch_of, number_of, qualified_segment_name, transaction_segment_name
from app.domain.names import mark_stream_name
from app.domain.records import (
    SEALED_SIZE_SHARD_EPOCHS,
    EpochRecord,
    RetentionType,
    SegmentRecord,
    StreamConfig,
    StreamState,
    TruncationRecord,
)
from app.domain.retention import CutOrdering, StreamCutRecord
from app.domain.scale_rules import (
    ScaleCheck,
    compute_epoch_transition,
    new_epoch_record,
    split_ranges,
    validate_scale,
)
from app.domain.streamcuts import (
    EpochWindow,
    completed_truncation,
    is_stream_cut_valid,
    next_truncation,
    stream_cut_span,
    successors_with_predecessors,
)
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnId, TxnRecord, TxnStatus, commits_in_place, rolling_epochs
from app.services import truncation as truncation_service
from app.store.pool import create_pool
from app.store.retention import PgRetentionStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore
from app.testing.controller import running_controller
from app.testing.scale import scale_request
from migrations.schema import metadata
from tests.api.conftest import served

DAY = 86_400_000
END = 1_800_000_000_000  # fixed, so every run seeds the same history
SPEC = SeedSpec(
    streams=4,
    scopes=2,
    epochs_per_stream=1_200,  # crosses a sealed-size shard boundary
    seed=11,
    start_ms=END - 4 * DAY,
    span_ms=4 * DAY,
    scale_mix=ScaleMix(split=40, merge=40, rolling=20),
    txns_per_stream=150,
    txn_mix=TxnMix(committed=70, aborted=20, open=10),
    max_segments=6,
    retention_fraction=0.75,
    tag_pool=3,
)
ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def pool_for(url: str) -> AsyncIterator[Any]:
    pool = await create_pool(url, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


# --- a stream as read back ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRow:
    """A row of truncation_history."""

    completed_at: int
    stream_cut: dict[int, int]
    truncated_bytes: int
    total_truncated_bytes: int
    deleted_segments: list[int]


@dataclass(frozen=True)
class Details:
    """A row of completed_txn_details."""

    epoch: int
    creation_time: int
    lease_ms: int
    lease_expiry: int
    max_exec_expiry: int
    writer_id: str | None
    writer_time: int | None
    commit_order: int | None
    requested_at: int | None


@dataclass
class Loaded:
    scope: str
    name: str
    stream_id: int
    creation_time: int
    state: StreamState
    config: StreamConfig
    records: list[EpochRecord]
    history: list[tuple[list[int], list[int]]]  # per epoch: (sealed, created) as stored
    segments: dict[int, tuple[SegmentRecord, int | None]]  # id -> (record, sealed in epoch)
    shards: dict[int, dict[int, int]]
    truncation: TruncationRecord
    head: dict[int, int]
    retention: list[StreamCutRecord]
    completed: list[tuple[TxnId, str, int]]
    active: list[TxnRecord]
    truncations: list[HistoryRow]  # in completion order
    details: dict[TxnId, Details]

    @property
    def sizes(self) -> dict[int, int]:
        return {k: v for shard in self.shards.values() for k, v in shard.items()}

    def roll_pairs(self) -> list[int]:
        """Epochs A+1 of each rolling transaction (duplicates come in pairs A+1, A+2)."""
        pairs, e = [], 1
        while e < len(self.records):
            if self.records[e].is_duplicate:
                pairs.append(e)
                e += 2
            else:
                e += 1
        return pairs

    def active_at(self, time_ms: int) -> EpochRecord:
        """The epoch the current-epoch pointer named at `time_ms` (A+1 of a roll never is active)."""
        skipped = set(self.roll_pairs())
        candidates = [r for r in self.records if r.epoch not in skipped]
        times = [r.creation_time for r in candidates]
        return candidates[bisect.bisect_right(times, time_ms) - 1]


async def load(pool: Any, scope: str, name: str) -> Loaded:
    """Everything about one stream, read through the real stores (raw SQL only for the history
    lists and the segment rows, which no store method returns in bulk)."""
    streams, retention, txns = PgStreamStore(pool), PgRetentionStore(pool), PgTxnStore(pool)
    pointer = await streams.get_current_epoch_pointer(scope, name)
    records = await streams.get_epochs(scope, name, 0, pointer.value)
    stream_id = await pool.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = $2", scope, name)
    history = [
        (list(r["sealed_segments"]), list(r["created_segments"]))
        for r in await pool.fetch(
            "SELECT sealed_segments, created_segments FROM epochs WHERE stream_id = $1 ORDER BY epoch",
            stream_id,
        )
    ]
    segments = {
        r["segment_id"]: (
            SegmentRecord(r["number"], r["creation_epoch"], r["creation_time"], r["key_start"], r["key_end"]),
            r["sealed_epoch"],
        )
        for r in await pool.fetch("SELECT * FROM segments WHERE stream_id = $1", stream_id)
    }
    shards: dict[int, dict[int, int]] = {}
    for shard in range(pointer.value // SEALED_SIZE_SHARD_EPOCHS + 2):
        found = await streams.get_sealed_size_shard(scope, name, shard)
        if found is not None:
            shards[shard] = found.value
    context = await retention.get_context(scope, name)
    completed = [
        (TxnId(r["txn_high"], r["txn_low"]), r["status"], r["completion_time"])
        for r in await pool.fetch("SELECT * FROM completed_txns WHERE stream_id = $1", stream_id)
    ]
    truncations = [
        HistoryRow(
            r["completed_at"],
            {int(k): v for k, v in r["stream_cut"].items()},
            r["truncated_bytes"],
            r["total_truncated_bytes"],
            list(r["deleted_segments"]),
        )
        for r in await pool.fetch(
            "SELECT * FROM truncation_history WHERE stream_id = $1 ORDER BY id", stream_id
        )
    ]
    details = {
        TxnId(r["txn_high"], r["txn_low"]): Details(
            r["epoch"],
            r["creation_time"],
            r["lease_ms"],
            r["lease_expiry"],
            r["max_exec_expiry"],
            r["writer_id"],
            r["commit_time"],
            r["commit_order"],
            r["requested_at"],
        )
        for r in await pool.fetch("SELECT * FROM completed_txn_details WHERE stream_id = $1", stream_id)
    }
    return Loaded(
        scope=scope,
        name=name,
        stream_id=stream_id,
        creation_time=await streams.get_creation_time(scope, name),
        state=(await streams.get_state(scope, name)).value,
        config=(await streams.get_config(scope, name)).value,
        records=records,
        history=history,
        segments=segments,
        shards=shards,
        truncation=(await streams.get_truncation(scope, name)).value,
        head=await streams.get_head(scope, name),
        retention=list(context.records),
        completed=completed,
        active=[v.value for v in await txns.list_active(scope, name)],
        truncations=truncations,
        details=details,
    )


def sorted_record(record: EpochRecord) -> EpochRecord:
    return dataclasses.replace(record, segments=record.sorted_segments())


# --- the invariants ------------------------------------------------------------------------------


def check_epochs(s: Loaded) -> None:
    """Epochs 0..n, each covering the key space exactly; ids carry their creation epoch; every
    epoch replays through the domain's rules (a scale or a roll) and its history lists are the
    transition (sealed = previous minus next, created = next minus previous; empty for a roll)."""
    records = s.records
    assert [r.epoch for r in records] == list(range(len(records)))
    space_end = records[0].sorted_segments()[-1].key_end
    for record in records:
        segs = record.sorted_segments()
        assert segs[0].key_start == 0.0 and segs[-1].key_end == space_end, record.epoch
        assert all(a.key_end == b.key_start for a, b in itertools.pairwise(segs)), record.epoch
        assert all(seg.creation_epoch <= record.epoch for seg in segs)
        assert len(segs) <= SPEC.max_segments
    assert s.history[0] == ([], [seg.id for seg in records[0].sorted_segments()])
    highest = max(seg.number for seg in records[0].segments)
    rolls = set(s.roll_pairs())
    e = 1
    while e < len(records):
        previous, record = records[e - 1], records[e]
        if e in rolls:
            txn_epoch = records[record.reference_epoch]
            assert txn_epoch.reference_epoch == txn_epoch.epoch and not commits_in_place(previous, txn_epoch)
            planned = rolling_epochs(previous, txn_epoch, record.creation_time)
            assert record == planned.txn_copy
            assert records[e + 1] == planned.active_copy
            assert s.history[e] == ([], []) and s.history[e + 1] == ([], [])
            e += 2
            continue
        sealed, created = s.history[e]
        before, after = {seg.id for seg in previous.segments}, {seg.id for seg in record.segments}
        assert set(sealed) == before - after and sorted(sealed) == sealed
        assert set(created) == after - before
        ranges = [
            (seg.key_start, seg.key_end) for seg in record.sorted_segments() if seg.id in after - before
        ]
        assert validate_scale(previous, sealed, ranges, s.config.scaling.min_num_segments) is ScaleCheck.OK
        change = new_epoch_record(
            previous, compute_epoch_transition(previous, sealed, ranges, record.creation_time)
        )
        assert sorted_record(change.record) == record
        assert sorted(change.sealed) == sealed and list(change.created) == created  # as add_epoch stores them
        assert min(number_of(c) for c in created) == highest + 1  # numbers only grow (max + 1)
        highest = max(number_of(c) for c in created)
        if len(sealed) == 1:  # a split cuts as an UP event does
            parent = next(seg for seg in previous.segments if seg.id == sealed[0])
            assert ranges == split_ranges(parent, len(ranges), s.config.scaling.scale_factor)
        e += 1


def check_segments_and_sizes(s: Loaded) -> None:
    """One row per segment, equal to its record; sealed in the first epoch that lacks it; a size
    for every sealed segment, in the shard of its creation epoch, and for nothing else."""
    first_seen: dict[int, SegmentRecord] = {}
    last_seen: dict[int, int] = {}
    for record in s.records:
        for seg in record.segments:
            first_seen.setdefault(seg.id, seg)
            last_seen[seg.id] = record.epoch
    assert set(s.segments) == set(first_seen)
    last = len(s.records) - 1
    for sid, (row, sealed_in) in s.segments.items():
        assert row == first_seen[sid] and epoch_of(sid) == row.creation_epoch
        assert sealed_in == (None if last_seen[sid] == last else last_seen[sid] + 1), sid
    sealed = {sid for sid, (_, sealed_in) in s.segments.items() if sealed_in is not None}
    assert set(s.sizes) == sealed
    for shard, sizes in s.shards.items():
        assert all(
            epoch_of(sid) // SEALED_SIZE_SHARD_EPOCHS == shard and size >= 0 for sid, size in sizes.items()
        )


def check_retention(s: Loaded) -> None:
    """Recorded cuts are valid tail cuts, in time order, each at or after the one before and
    after the truncation point, with sizes as the domain measures them; the truncation point is
    the cut one cycle before the oldest record kept. The truncation record itself is
    checked against the history (check_truncation_history)."""
    window = EpochWindow.of(s.records)
    ordering = CutOrdering(window)
    sizes = s.sizes
    policy = s.config.retention
    if policy is None:
        assert s.retention == [] and s.truncation == TruncationRecord() and s.truncations == []
        return
    assert policy.retention_type is RetentionType.TIME and policy.retention_param > 0
    times = [r.recording_time for r in s.retention]
    assert times == sorted(times) and all(
        b - a > SPEC.retention_frequency_ms for a, b in itertools.pairwise(times)
    )
    for previous, record in zip([None, *s.retention], s.retention, strict=False):
        assert is_stream_cut_valid(record.stream_cut, window)
        assert ordering.size_till(record.stream_cut, sizes) == record.recording_size
        assert record.stream_cut.keys() == {seg.id for seg in s.active_at(record.recording_time).segments}
        if previous is not None:
            assert ordering.equal_or_after(record.stream_cut, previous.stream_cut)
    truncation = s.truncation
    if not truncation.stream_cut:
        assert s.head == {seg.id: 0 for seg in s.records[0].segments} and s.truncations == []
        return
    cut = truncation.stream_cut
    assert s.head == cut
    assert all(ordering.equal_or_after(r.stream_cut, cut) for r in s.retention)
    if s.retention:  # what is kept is younger than the minimum: the truncation took all it could
        assert s.retention[-1].recording_time - s.retention[0].recording_time < policy.retention_param
    # Cycles run every frequency + 1 ms (a record needs strictly more than the frequency); the
    # oldest kept record is one cycle after the truncation cut.
    step = SPEC.retention_frequency_ms + 1
    assert cut.keys() == {seg.id for seg in s.active_at(s.retention[0].recording_time - step).segments}


def check_truncation_history(s: Loaded, end: int) -> None:
    """The history replays through the domain's truncation rules from an untruncated stream:
    each row is what next_truncation makes of the completed record before it at the row's cut
    (the bytes it removed, the running total, the segments it deleted), completed a retention
    minimum or more after the newest epoch of its cut began; the stored record is the last one
    completed (streamcuts.completed_truncation). So the deleted sets are disjoint, their union
    is the record's, and the removed bytes add up to its size."""
    window = EpochWindow.of(s.records)
    ordering = CutOrdering(window)
    sizes = s.sizes
    record = TruncationRecord()
    deleted: set[int] = set()
    previous_time = s.creation_time
    for row in s.truncations:
        cut = row.stream_cut
        assert is_stream_cut_valid(cut, window)
        if record.stream_cut:
            assert ordering.equal_or_after(cut, record.stream_cut) and cut != record.stream_cut
        running = next_truncation(record, cut, stream_cut_span(cut, window), window, sizes)
        assert row.deleted_segments == sorted(running.to_delete)
        assert row.total_truncated_bytes == running.size_till == ordering.size_till(cut, sizes)
        assert row.truncated_bytes == running.size_till - record.size_till >= 0
        assert deleted.isdisjoint(row.deleted_segments)
        deleted.update(row.deleted_segments)
        assert all(s.segments[sid][1] is not None for sid in row.deleted_segments)  # sealed ones only
        assert s.config.retention is not None
        newest = s.records[max(epoch_of(sid) for sid in cut)]
        assert newest.creation_time + s.config.retention.retention_param <= row.completed_at
        assert previous_time < row.completed_at <= end
        previous_time = row.completed_at
        record = completed_truncation(running)
    assert s.truncation == record
    assert record.deleted_segments == deleted and record.size_till == sum(
        r.truncated_bytes for r in s.truncations
    )


def check_transactions(s: Loaded, end: int) -> int:
    """Ids carry the reference epoch (high bits); a commit lands in place while its epoch is the active
    reference, or is the roll that copied its epoch; open ones are within their lease rules;
    every completed one has the details its completion keeps (check_txn_details).
    Returns how many commits rolled."""
    records = s.records
    rolls = {records[e].creation_time: records[e] for e in s.roll_pairs()}
    roll_times = sorted(rolls)
    lows = [txn.low for txn, _, _ in s.completed] + [t.txn.low for t in s.active]
    assert len(set(lows)) == len(lows) and min(lows) > 0
    rolled = 0
    for txn, status, done in s.completed:
        assert txn.high == txn.epoch << 32 and records[txn.epoch].reference_epoch == txn.epoch
        assert s.creation_time < done <= end
        assert records[txn.epoch].creation_time < done
        if status == "COMMITTED":
            active = s.active_at(done)
            if not commits_in_place(active, records[txn.epoch]):
                # Rolled: completed just after the roll that copied its epoch.
                i = bisect.bisect_right(roll_times, done - 1) - 1
                assert i >= 0 and done - roll_times[i] <= 50, (txn, done)
                assert rolls[roll_times[i]].reference_epoch == txn.epoch
                rolled += 1
            else:
                details = s.details[txn]
                assert details.lease_expiry == details.creation_time + details.lease_ms, "never pinged"
        else:
            assert status == "ABORTED"
    check_txn_details(s)
    limits = DEFAULT_TXN_LIMITS
    for record in s.active:
        assert record.status is TxnStatus.OPEN and record.txn.epoch == record.epoch
        assert record.epoch == s.active_at(record.creation_time).reference_epoch
        assert limits.min_lease_ms <= record.lease_ms <= limits.max_lease_ms
        assert s.creation_time <= record.creation_time < end < record.lease_expiry <= record.max_exec_expiry
        assert record.max_exec_expiry == record.creation_time + limits.max_execution_time(record.lease_ms)
        assert record.commit_time is None and record.commit_order is None and record.writer_id is None
    return rolled


def check_txn_details(s: Loaded) -> None:
    """What the completing statements keep of the active record: created while an epoch
    referring to the transaction's was active, asked to complete after creation and before
    completion; the lease last set by the creation or a ping before the request. A commit was
    asked for while the lease ran and has a commit order growing with request time; an abort
    was asked for either within the lease (by the client) or after lease and grace had run
    out (by the timeout sweeper)."""
    limits = DEFAULT_TXN_LIMITS
    assert set(s.details) == {txn for txn, _, _ in s.completed}
    commits: list[tuple[int, int]] = []
    for txn, status, done in s.completed:
        d = s.details[txn]
        assert d.epoch == txn.epoch
        assert s.active_at(d.creation_time).reference_epoch == txn.epoch
        assert d.requested_at is not None
        assert s.creation_time <= d.creation_time < d.requested_at <= done
        assert limits.min_lease_ms <= d.lease_ms <= limits.max_lease_ms
        assert d.max_exec_expiry == d.creation_time + limits.max_execution_time(d.lease_ms)
        assert d.creation_time <= d.lease_expiry - d.lease_ms <= d.requested_at
        assert d.lease_expiry <= d.max_exec_expiry
        if status == "COMMITTED":
            assert d.requested_at < d.lease_expiry and d.commit_order is not None
            assert d.writer_time is None or (d.writer_id is not None and d.writer_time <= d.requested_at)
            commits.append((d.requested_at, d.commit_order))
        else:
            assert d.commit_order is None and d.writer_id is None and d.writer_time is None
            assert d.lease_expiry == d.creation_time + d.lease_ms
            assert (
                d.requested_at < d.lease_expiry or d.requested_at >= d.lease_expiry + limits.timeout_grace_ms
            )
    commits.sort()
    assert all(a[1] < b[1] for a, b in itertools.pairwise(commits) if a[0] < b[0])
    assert len({order for _, order in commits}) == len(commits)


async def check_database_wide(pool: Any, spec: SeedSpec) -> None:
    """Hashes as the trigger computes them, mark streams beside every stream, tags indexed,
    buckets of open transactions as the database decides them, segment-store rows."""
    wrong = await pool.fetchval(
        "SELECT count(*) FROM streams WHERE name_hash <> pgc_java_hash(scope || '/' || name)"
    )
    assert wrong == 0
    slots = list(stream_slots(spec))
    marks = await pool.fetch(
        "SELECT s.scope, s.name, e.segment_ids, st.state, c.tags FROM streams s"
        " JOIN epochs e ON e.stream_id = s.id JOIN stream_states st ON st.stream_id = s.id"
        " JOIN stream_configs c ON c.stream_id = s.id WHERE s.name LIKE '\\_MARK%'"
    )
    assert {(m["scope"], m["name"]) for m in marks} == {(x.scope, mark_stream_name(x.name)) for x in slots}
    assert all(m["segment_ids"] == [0] and m["state"] == "ACTIVE" and m["tags"] == [] for m in marks)
    tagged = await pool.fetch(
        "SELECT s.scope, s.name, t FROM streams s"
        " JOIN stream_configs c ON c.stream_id = s.id, unnest(c.tags) t"
    )
    indexed = await pool.fetch("SELECT scope, stream, tag FROM stream_tags")
    assert {(r["scope"], r["name"], r["t"]) for r in tagged} == {
        (r["scope"], r["stream"], r["tag"]) for r in indexed
    }
    assert tagged, "the spec should tag some streams"
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM transactions t JOIN streams s ON s.id = t.stream_id"
            " WHERE t.bucket <> pgc_request_bucket(s.scope, s.name)"
        )
        == 0
    )
    # The embedded segment store holds every active segment (truncated at the cut) and the
    # segments of every open transaction.
    missing = await pool.fetchval(
        "SELECT count(*) FROM streams s JOIN stream_current_epochs ce ON ce.stream_id = s.id"
        " JOIN epochs e ON e.stream_id = s.id AND e.epoch = ce.epoch, unnest(e.segment_ids) sid"
        " WHERE NOT EXISTS (SELECT 1 FROM embedded_segments x WHERE x.name = s.scope || '/' || s.name || '/'"
        " || (sid & 4294967295) || '.#epoch.' || (sid >> 32) AND x.kind = 'stream' AND NOT x.sealed"
        " AND x.start_offset <= x.length)"
    )
    assert missing == 0
    for row in await pool.fetch(
        "SELECT s.scope, s.name, t.txn_high, t.txn_low, e.segment_ids FROM transactions t"
        " JOIN streams s ON s.id = t.stream_id JOIN epochs e ON e.stream_id = s.id AND e.epoch = t.epoch"
    ):
        for sid in row["segment_ids"]:
            parent = qualified_segment_name(
                row["scope"], row["name"], (row["txn_high"] >> 32 << 32) | number_of(sid)
            )
            name = transaction_segment_name(parent, row["txn_high"], row["txn_low"])
            assert (
                await pool.fetchval("SELECT kind FROM embedded_segments WHERE name = $1", name)
                == "transaction"
            ), name


async def check_reporting_views(pool: Any) -> None:
    """What analysts read agrees with itself: per stream, the truncation history's removed bytes
    add up (running total, and the truncation record's figure), its deleted sets are disjoint
    and make up the record's (and the segments view's deleted_by_truncation); every completed
    transaction has its details, so open durations and commit or abort latencies are there and
    not negative, and they look like a real controller's (tens of ms, a tail of seconds)."""
    truncations = {r["stream_id"]: r for r in await pool.fetch("SELECT * FROM reporting.truncations")}
    history: dict[int, list[Any]] = {}
    for r in await pool.fetch("SELECT * FROM reporting.truncation_history ORDER BY stream_id, truncation_id"):
        history.setdefault(r["stream_id"], []).append(r)
    assert set(history) <= set(truncations)
    for stream_id, t in truncations.items():
        rows = history.get(stream_id, [])
        assert not t["in_progress"] and t["deleting_segments"] == []
        assert t["truncated"] == bool(rows)
        assert sum(r["truncated_bytes"] for r in rows) == t["truncated_bytes"]
        total, seen = 0, set[int]()
        for r in rows:
            total += r["truncated_bytes"]
            assert r["total_truncated_bytes"] == total and r["truncated_bytes"] >= 0
            assert r["deleted_segments"] == sorted(r["deleted_segments"])
            assert r["deleted_count"] == len(r["deleted_segments"])
            assert seen.isdisjoint(r["deleted_segments"])
            seen.update(r["deleted_segments"])
        assert seen == set(t["deleted_segments"])
        assert [r["completion_time"] for r in rows] == sorted(r["completion_time"] for r in rows)
        if rows:
            assert rows[-1]["stream_cut"] == t["stream_cut"]
    deleted = await pool.fetch(
        "SELECT stream_id, segment_id FROM reporting.segments WHERE deleted_by_truncation"
    )
    assert {(r["stream_id"], r["segment_id"]) for r in deleted} == {
        (stream_id, seg) for stream_id, rows in history.items() for r in rows for seg in r["deleted_segments"]
    }
    assert any(len(rows) > 1 for rows in history.values()), "the spec should truncate a stream repeatedly"

    txns = await pool.fetch("SELECT * FROM reporting.transactions")
    completed = [r for r in txns if r["outcome"] is not None]
    assert len(completed) == await pool.fetchval("SELECT count(*) FROM completed_txns") > 0
    commit_latencies, abort_latencies, timed_out = [], [], set()
    for r in completed:
        assert r["epoch"] == r["txn_high"] >> 32 and r["creation_time"] is not None
        assert r["open_duration_ms"] > 0
        if r["outcome"] == "COMMITTED":
            assert r["abort_latency_ms"] is None and r["timed_out"] is None and r["commit_order"] is not None
            assert r["commit_latency_ms"] >= 0
            commit_latencies.append(r["commit_latency_ms"])
        else:
            assert r["commit_latency_ms"] is None and r["commit_order"] is None
            assert r["abort_latency_ms"] >= 0
            abort_latencies.append(r["abort_latency_ms"])
            timed_out.add(r["timed_out"])
    for r in txns:
        if r["outcome"] is None:  # the seeder leaves no commit or abort in flight
            assert r["status"] == "OPEN" and r["requested_at"] is None and r["open_duration_ms"] is None
    assert timed_out == {True, False}
    for latencies in (commit_latencies, abort_latencies):
        latencies.sort()
        assert 10 <= latencies[len(latencies) // 2] <= 300 and latencies[-1] >= 1_000


async def test_a_seeded_history_keeps_every_invariant(db_url: str) -> None:
    summary = await seed_history(db_url, SPEC)
    assert (summary.streams, summary.skipped, summary.epochs) == (4, 0, 4 * 1_200)
    assert summary.rows["epochs"] == 4 * 1_200 + 4  # and the mark streams' epoch 0
    async with pool_for(db_url) as pool:
        loaded = [await load(pool, slot.scope, slot.name) for slot in stream_slots(SPEC)]
        for s in loaded:
            assert s.state is StreamState.ACTIVE
            s.config.validate()
            assert len(s.records) == SPEC.epochs_per_stream
            assert (await PgStreamStore(pool).get_epoch_transition(s.scope, s.name)).value is None
            check_epochs(s)
            check_segments_and_sizes(s)
            check_retention(s)
            check_truncation_history(s, SPEC.end_ms)
            rolled = check_transactions(s, SPEC.end_ms)
            # Each roll commits 1-3 transactions of its own; the others are the asked number.
            assert len(s.roll_pairs()) <= rolled <= 3 * len(s.roll_pairs())
            others = len(s.completed) + len(s.active) - rolled
            assert 0.9 * SPEC.txns_per_stream <= others <= 1.1 * SPEC.txns_per_stream
        await check_database_wide(pool, SPEC)
        await check_reporting_views(pool)
    # The spec exercises every kind of record somewhere.
    assert all(s.roll_pairs() for s in loaded)
    assert any(s.truncation.stream_cut for s in loaded) and any(s.config.retention is None for s in loaded)
    assert any(len(s.shards) > 1 for s in loaded)
    assert any(s.active for s in loaded)
    statuses = {status for s in loaded for _, status, _ in s.completed}
    assert statuses == {"COMMITTED", "ABORTED"}


async def test_retention_from_the_first_truncation_on(db_url: str) -> None:
    """An hour and a half of history: streams whose retention minimum is an hour have truncated
    once, measured from epoch 0; the others have not yet. Both read back consistently."""
    span = 5_400_000
    spec = dataclasses.replace(SPEC, streams=12, epochs_per_stream=150, start_ms=END - span, span_ms=span)
    spec = dataclasses.replace(spec, retention_fraction=1.0, txns_per_stream=10)
    await seed_history(db_url, spec)
    async with pool_for(db_url) as pool:
        loaded = [await load(pool, slot.scope, slot.name) for slot in stream_slots(spec)]
    for s in loaded:
        check_epochs(s)
        check_segments_and_sizes(s)
        check_retention(s)
        check_truncation_history(s, spec.end_ms)
        check_transactions(s, spec.end_ms)
    truncated = [s for s in loaded if s.truncation.stream_cut]
    assert truncated and len(truncated) < len(loaded)
    # Each truncated once: the oldest kept record is less than two cycles after creation.
    step = SPEC.retention_frequency_ms + 1
    assert all(s.retention[0].recording_time - 2 * step < s.creation_time for s in truncated)
    assert all(len(s.truncations) == 1 and s.truncation.deleted_segments for s in truncated)


# --- pure generation ---------------------------------------------------------------------------------


def generate(spec: SeedSpec, step: int) -> Rows:
    """Every row of `spec`, generated `step` epochs at a time, into one buffer."""
    rows, collected = Rows(), Rows()
    for i, slot in enumerate(stream_slots(spec)):
        history = StreamHistory(spec, slot, StreamIds(2 * i + 1, 2 * i + 2), rows)
        while True:
            done = history.advance(step)
            part, base = rows.take(), collected.txn_ids
            # Ordinals count per batch; number them on as the store's counter reservation would.
            part.completed_txns = [(r[0], r[1], base + r[2], *r[3:]) for r in part.completed_txns]
            part.completed_txn_details = [
                (r[0], r[1], base + r[2], *r[3:]) for r in part.completed_txn_details
            ]
            part.transactions = [(r[0], r[1], base + r[2], *r[3:]) for r in part.transactions]
            part.txn_segments = [(base + r[0], *r[1:]) for r in part.txn_segments]
            for table in Rows.TABLES:
                collected.table(table).extend(part.table(table))
            collected.txn_ids += part.txn_ids
            collected.user_epochs += part.user_epochs
            if done:
                break
    return collected


def test_generation_is_deterministic_whatever_the_batch_size() -> None:
    spec = dataclasses.replace(SPEC, streams=3, epochs_per_stream=700)
    whole = generate(spec, 10**9)
    assert generate(spec, 37) == whole
    assert generate(dataclasses.replace(spec, seed=12), 10**9).epochs != whole.epochs
    assert len(whole.epochs) == 3 * 700 + 3


def test_rows_fit_the_declared_schema() -> None:
    """Each buffered row has one value per copied column, and every column the seeder leaves
    out has a default (a schema change that adds a required column fails here first)."""
    rows = generate(dataclasses.replace(SPEC, streams=2, epochs_per_stream=300), 10**9)
    for table, columns in COLUMNS.items():
        declared = metadata.tables[table].columns
        assert set(columns) <= set(declared.keys()), table
        for column in declared:
            if column.name not in columns:
                assert column.nullable or column.server_default is not None, (table, column.name)
        assert rows.table(table), f"the sample should fill {table}"
        assert all(len(row) == len(columns) for row in rows.table(table)), table


def test_shard_size_matches_the_workflows() -> None:
    assert SEALED_SIZE_SHARD_EPOCHS == truncation_service.SEALED_SIZE_SHARD_EPOCHS
    assert SEALED_SIZE_SHARD_EPOCHS == workflow_common.SEALED_SIZE_SHARD_EPOCHS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"total_epochs": 3, "epochs_per_stream": None}, "cannot give each"),
        ({"total_epochs": 100}, "exactly one"),
        ({"epochs_per_stream": 0}, "epochs per stream"),
        ({"stream_prefix": "no/slash"}, "not a valid"),
        ({"scope_prefix": ""}, None),  # "0" alone is a valid scope name
        ({"max_segments": 1}, "max segments"),
        ({"scale_mix": ScaleMix(split=0, merge=0, rolling=5)}, "split or merge"),
        ({"txn_mix": TxnMix(committed=-1)}, "must not be negative"),
        ({"retention_fraction": 1.5}, "retention fraction"),
        ({"span_ms": 0}, "time span"),
        ({"streams": 0}, "positive"),
    ],
)
def test_bad_specs_are_refused(change: dict[str, Any], message: str | None) -> None:
    spec = dataclasses.replace(SPEC, **change)
    if message is None:
        spec.validate()
        return
    with pytest.raises(InvalidInput, match=message):
        spec.validate()


# --- a running controller over seeded data -------------------------------------------------------------


async def test_a_running_controller_serves_seeded_streams(db_url: str) -> None:
    spec = dataclasses.replace(SPEC, streams=2, epochs_per_stream=400)
    await seed_history(db_url, spec)
    async with pool_for(db_url) as pool:
        loaded = [await load(pool, slot.scope, slot.name) for slot in stream_slots(spec)]
    async with running_controller(db_url, workers=False) as services, served(services) as stub:
        for s in loaded:
            info = pb.StreamInfo(scope=s.scope, stream=s.name)
            current = await stub.getCurrentSegments(info)
            last = s.records[-1].sorted_segments()
            assert [r.segmentId.segmentId for r in current.segmentRanges] == [seg.id for seg in last]
            assert [(r.minKey, r.maxKey) for r in current.segmentRanges] == [
                (g.key_start, g.key_end) for g in last
            ]
            for epoch in (0, len(s.records) // 2, len(s.records) - 1):
                reply = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info, epoch=epoch))
                ids = [r.segmentId.segmentId for r in reply.segmentRanges]
                assert ids == [seg.id for seg in s.records[epoch].sorted_segments()]
            sealed = [(sid, e) for sid, (_, e) in s.segments.items() if e is not None][:25]
            for sid, sealed_in in sealed:
                reply = await stub.getSegmentsImmediatelyFollowing(
                    pb.SegmentId(streamInfo=info, segmentId=sid)
                )
                expected = successors_with_predecessors(sid, s.records[sealed_in], s.records[sealed_in - 1])
                got = {e.segment.segmentId.segmentId: sorted(e.value) for e in reply.segments}
                assert got == {seg.id: preds for seg, preds in expected}
            head = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info))
            assert {loc.segmentId.segmentId: loc.offset for loc in head.segments} == s.head
            for record in s.retention:
                valid = await stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut=record.stream_cut))
                assert valid.response
            between = await stub.getSegmentsBetween(
                pb.StreamCutRange(streamInfo=info, **{"from": s.head}, to={})
            )
            assert {seg.segmentId for seg in between.segments} >= {seg.id for seg in last}
            completed = await stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=info))
            assert 0 < len(completed.response) <= 500
            outcomes = {(t.txnId.highBits, t.txnId.lowBits): t.status for t in completed.response}
            stored = {(txn.high, txn.low): status for txn, status, _ in s.completed}
            assert all(pb.TxnResponse.Status.Name(v) == stored[k] for k, v in outcomes.items())
            for active in s.active:
                state = await stub.checkTransactionState(
                    pb.TxnRequest(
                        streamInfo=info, txnId=pb.TxnId(highBits=active.txn.high, lowBits=active.txn.low)
                    )
                )
                assert state.state == pb.TxnState.OPEN
        listed = await services.streams.list_streams(loaded[0].scope, "")
        assert loaded[0].name in listed.names


# --- the real workflows carry on from a seeded history -------------------------------------------------


async def wait_for(check: Any, what: str) -> None:
    for _ in range(1_000):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} did not happen")


async def test_real_workflows_carry_on_from_a_seeded_history(db_url: str) -> None:
    """A seeded open transaction on an older epoch commits by rolling, a manual scale continues
    the numbering, and the history still replays through the domain's rules afterwards."""
    end = int(time.time() * 1000) + 10 * 60_000  # leases still running while the test runs
    spec = dataclasses.replace(
        SPEC, streams=1, epochs_per_stream=300, start_ms=end - DAY, span_ms=DAY, txn_mix=TxnMix(50, 0, 50)
    )
    await seed_history(db_url, spec)
    slot = next(stream_slots(spec))
    info = pb.StreamInfo(scope=slot.scope, stream=slot.name)
    async with pool_for(db_url) as pool:
        before = await load(pool, slot.scope, slot.name)
    active = before.records[-1]
    rolling = [t for t in before.active if t.epoch != active.reference_epoch]
    assert rolling, "the spec should leave an open transaction on an older epoch"
    txn = rolling[0].txn
    async with running_controller(db_url) as services, served(services) as stub:
        assert (await services.transactions.commit(slot.scope, slot.name, txn)).value == "SUCCESS"

        async def committed() -> bool:
            return await services.transactions.state(slot.scope, slot.name, txn) is TxnStatus.COMMITTED

        await wait_for(committed, "the rolling commit")
        async with pool_for(db_url) as pool:
            rolled = await load(pool, slot.scope, slot.name)
        assert len(rolled.records) == len(before.records) + 2
        assert rolled.records[-2].reference_epoch == txn.epoch
        # The commit took its order from the sequence the seeded commits were numbered from.
        seeded = [d.commit_order for d in before.details.values() if d.commit_order is not None]
        order = rolled.details[txn].commit_order
        assert seeded and order is not None and order > max(seeded)
        check_epochs(rolled)
        check_segments_and_sizes(rolled)

        newest = rolled.records[-1].sorted_segments()[0]
        ranges = split_ranges(newest, 2, 2)
        reply = await stub.scale(scale_request(info, [newest.id], ranges, timestamp=end))
        assert reply.status == pb.ScaleResponse.STARTED

        async def scaled() -> bool:
            status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=reply.epoch))
            return bool(status.status == pb.ScaleStatusResponse.SUCCESS)

        await wait_for(scaled, "the scale")
        async with pool_for(db_url) as pool:
            after = await load(pool, slot.scope, slot.name)
        assert len(after.records) == len(rolled.records) + 1
        check_epochs(after)
        check_segments_and_sizes(after)


# --- resuming, conflicts and failures ----------------------------------------------------------------

SMALL = dataclasses.replace(SPEC, streams=4, epochs_per_stream=50, retention_fraction=0.5)


async def stream_content(pool: Any, scope: str, name: str) -> list[tuple[Any, ...]]:
    """A stream's epochs and segments without its database id."""
    epochs = await pool.fetch(
        "SELECT e.epoch, e.reference_epoch, e.creation_time, e.segment_ids, e.key_starts, e.sealed_segments"
        " FROM epochs e JOIN streams s ON s.id = e.stream_id WHERE s.scope = $1 AND s.name = $2 ORDER BY 1",
        scope,
        name,
    )
    segments = await pool.fetch(
        "SELECT g.segment_id, g.sealed_epoch FROM segments g JOIN streams s ON s.id = g.stream_id"
        " WHERE s.scope = $1 AND s.name = $2 ORDER BY 1",
        scope,
        name,
    )
    return [tuple(r) for r in epochs] + [tuple(r) for r in segments]


async def delete_streams(pool: Any, slots: list[StreamSlot], *, marks: bool = True) -> None:
    """Removes streams with their segment-store rows, as deleting them for good would."""
    for slot in slots:
        for name in [slot.name, mark_stream_name(slot.name)] if marks else [slot.name]:
            await pool.execute("DELETE FROM streams WHERE scope = $1 AND name = $2", slot.scope, name)
            await pool.execute("DELETE FROM embedded_segments WHERE name LIKE $1", f"{slot.scope}/{name}/%")


async def test_existing_streams_are_refused_or_skipped_on_resume(db_url: str) -> None:
    slots = list(stream_slots(SMALL))
    first = await seed_history(db_url, SMALL, analyze=False)
    assert (first.streams, first.skipped) == (4, 0)
    with pytest.raises(AlreadyExists, match=r"seed0/stream0 exists already"):
        await seed_history(db_url, SMALL)
    async with pool_for(db_url) as pool:
        kept = [await stream_content(pool, s.scope, s.name) for s in slots]
        await delete_streams(pool, [slots[1], slots[3]])
        again = await seed_history(db_url, SMALL, resume=True)
        assert (again.streams, again.skipped, again.epochs) == (2, 2, 100)
        assert [await stream_content(pool, s.scope, s.name) for s in slots] == kept
        # A watermark stream without its stream is no seeded stream: resuming cannot pair them.
        await delete_streams(pool, [slots[2]], marks=False)
        with pytest.raises(AlreadyExists, match=r"_MARKstream2 exists already"):
            await seed_history(db_url, SMALL, resume=True)


async def test_a_failed_run_leaves_whole_streams_only(db_url: str) -> None:
    """Stream 2 fails in its last batch (a segment-store row of it exists already): the
    streams before it are complete, nothing of stream 2 or later remains, and a resumed run
    finishes the job."""
    spec = dataclasses.replace(SMALL, mark_streams=False)
    slots = list(stream_slots(spec))
    rows = generate(spec, 10**9)
    prefix = f"{slots[2].scope}/{slots[2].name}/"
    taken = next(r[0] for r in rows.embedded_segments if r[0].startswith(prefix))
    async with pool_for(db_url) as pool:
        await pool.execute(
            "INSERT INTO embedded_segments (name, kind, created_at) VALUES ($1, 'stream', 0)", taken
        )
        with pytest.raises(AlreadyExists):
            # 20 epochs a batch: stream 2's epochs are copied in two batches before the failing one.
            await seed_history(db_url, spec, batch_epochs=20)
        present = await pool.fetch(
            "SELECT s.name, ce.epoch FROM streams s JOIN stream_current_epochs ce ON ce.stream_id = s.id"
        )
        assert {r["name"]: r["epoch"] for r in present} == {slots[0].name: 49, slots[1].name: 49}
        assert await pool.fetchval("SELECT count(*) FROM epochs") == 100
        assert (
            await pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE $1", prefix + "%")
            == 1
        ), "only the row that was there before"
        await pool.execute("DELETE FROM embedded_segments WHERE name = $1", taken)
        resumed = await seed_history(db_url, spec, batch_epochs=20, resume=True)
        assert (resumed.streams, resumed.skipped) == (2, 2)
        assert await pool.fetchval("SELECT count(*) FROM epochs") == 200


async def test_a_scope_being_deleted_is_refused(db_url: str) -> None:
    async with pool_for(db_url) as pool:
        await pool.execute("INSERT INTO scopes (name, state, created_at) VALUES ('seed1', 'DELETING', 0)")
        with pytest.raises(IllegalState, match="seed1"):
            await seed_history(db_url, SMALL)
        assert await pool.fetchval("SELECT count(*) FROM streams") == 0


async def test_a_recreated_name_numbers_its_segments_after_the_deleted_stream(db_url: str) -> None:
    spec = dataclasses.replace(SMALL, streams=1, epochs_per_stream=1)
    async with pool_for(db_url) as pool:
        await pool.execute(
            "INSERT INTO deleted_streams (scope, name, last_segment_number) VALUES"
            " ('seed0', 'stream0', 41), ('seed0', '_MARKstream0', 3)"
        )
        await seed_history(db_url, spec)
        streams = PgStreamStore(pool)
        numbers = [seg.number for seg in (await streams.get_epoch("seed0", "stream0", 0)).segments]
        assert numbers == list(range(42, 42 + len(numbers)))
        assert [seg.number for seg in (await streams.get_epoch("seed0", "_MARKstream0", 0)).segments] == [4]


async def test_copy_fires_the_name_hash_trigger(db_url: str) -> None:
    """COPY fires row triggers: the trigger, not the seeder's value, has the last word."""
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("INSERT INTO scopes (name, created_at) VALUES ('t', 0)")
        await conn.copy_records_to_table("streams", records=[(7, "t", "x", 0, 0)], columns=COLUMNS["streams"])
        assert (
            await conn.fetchval("SELECT name_hash FROM streams WHERE id = 7") == java_string_hash("t/x") != 0
        )
    finally:
        await conn.close()


# --- the command line ------------------------------------------------------------------------------------


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "--log-level",
        "WARNING",
        "dev",
        "seed",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_command_seeds_and_reports(db_url: str) -> None:
    code, out, err = await run_cli("--db-url", db_url, "--streams", "3", "--epochs-per-stream", "40")
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert (summary["streams"], summary["epochs"], summary["rows"]["epochs"]) == (3, 120, 123)
    assert "seeded 3/3 streams, 120/120 epochs" in err
    code, _, err = await run_cli("--db-url", db_url, "--streams", "3", "--epochs-per-stream", "40")
    assert code == 1 and "exists already" in err
    code, _, err = await run_cli("--db-url", db_url, "--streams", "3", "--mix", "split=x")
    assert code == 2 and "not a number" in err
    code, _, err = await run_cli("--db-url", db_url, "--streams", "3", "--total-epochs", "2")
    assert code == 2 and "cannot give each of 3 streams one" in err
