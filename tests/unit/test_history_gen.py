"""The history generator's rows for truncations and completed transactions, checked without a
database over many seeds and odd specs (tiny leases, short cycles, one epoch a stream, more
epochs than milliseconds): what tests/store/test_seed.py checks on one seeded database, here
where rare corners show up.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Any

import pytest

from app.dev.history_gen import (
    COMMIT_ORDER_PENDING,
    Rows,
    ScaleMix,
    SeedSpec,
    StreamHistory,
    StreamIds,
    TxnMix,
    stream_slots,
)
from app.domain.txns import TxnLimits

HOUR = 3_600_000
BASE = SeedSpec(
    streams=6,
    epochs_per_stream=150,
    start_ms=10 * HOUR,
    span_ms=48 * HOUR,
    scale_mix=ScaleMix(split=40, merge=40, rolling=20),
    txns_per_stream=40,
    txn_mix=TxnMix(committed=60, aborted=30, open=10),
    max_segments=5,
    retention_fraction=1.0,
    retention_frequency_ms=600_000,
)
SPECS = {
    "plain": BASE,
    "short leases": dataclasses.replace(BASE, txn_limits=TxnLimits(min_lease_ms=10, max_lease_ms=40)),
    "one epoch a stream": dataclasses.replace(BASE, epochs_per_stream=1),
    "more epochs than ms": dataclasses.replace(BASE, streams=2, epochs_per_stream=900, span_ms=700),
    "short cycles": dataclasses.replace(BASE, retention_frequency_ms=1_000, span_ms=2 * HOUR),
    "long history": dataclasses.replace(BASE, streams=2, epochs_per_stream=2_500, span_ms=30 * 24 * HOUR),
}


def generate(spec: SeedSpec) -> Rows:
    """Every row of `spec` in one buffer; transaction ordinals are distinct over the whole spec."""
    rows = Rows()
    for i, slot in enumerate(stream_slots(spec)):
        history = StreamHistory(spec, slot, StreamIds(2 * i + 1, 2 * i + 2), rows)
        assert history.advance(10**9), "a budget above the stream's epochs completes it in one call"
    return rows


def check_truncations(spec: SeedSpec, rows: Rows) -> int:
    """Per stream: removed bytes add up to the running total and the record's size, deleted sets
    are disjoint and make up the record's, the record is complete (nothing left to delete) at
    the last cut, completions come in time order within the span. Returns the history rows."""
    records = {r[0]: r for r in rows.stream_truncations}
    created = {r[0]: r[3] for r in rows.streams}
    history: dict[int, list[Any]] = defaultdict(list)
    for row in rows.truncation_history:
        history[row[0]].append(row)
    assert set(history) <= set(records)
    for sid, record in records.items():
        _, cut, _, deleted, to_delete, size_till, updating, version = record
        rows_of = history.get(sid, [])
        assert to_delete == [] and not updating and version == 2 * len(rows_of)
        total, seen, previous = 0, set[int](), created[sid]
        for _, completed_at, row_cut, removed, running, row_deleted in rows_of:
            total += removed
            assert removed >= 0 and running == total
            assert row_deleted == sorted(row_deleted) and seen.isdisjoint(row_deleted)
            seen.update(row_deleted)
            assert previous < completed_at <= spec.end_ms
            previous = completed_at
            assert json.loads(row_cut)
        assert size_till == total and deleted == sorted(seen)
        assert cut == (rows_of[-1][2] if rows_of else "{}")
    return len(rows.truncation_history)


def check_txn_details(spec: SeedSpec, rows: Rows) -> tuple[int, int]:
    """Every completed transaction has one details row: created before it was asked to complete,
    asked no later than it completed; commits asked for while the lease ran, their commit order
    left to the store; aborts asked for within the lease or after lease and grace ran out.
    Returns (commits, timed-out aborts)."""
    limits = spec.txn_limits
    completed = {(r[0], r[2]): (r[1], r[3], r[4]) for r in rows.completed_txns}
    details = {(r[0], r[2]): r for r in rows.completed_txn_details}
    assert len(details) == len(rows.completed_txn_details) and details.keys() == completed.keys()
    commits = timed_out = 0
    for key, (high, status, done) in completed.items():
        _, d_high, _, epoch, creation, lease, expiry, max_exec, writer, writer_time, order, requested = (
            details[key]
        )
        assert d_high == high and epoch == high >> 32
        assert creation < requested <= done
        assert limits.min_lease_ms <= lease <= limits.max_lease_ms
        assert max_exec == creation + limits.max_execution_time(lease)
        assert creation <= expiry - lease <= requested and expiry <= max_exec
        if status == "COMMITTED":
            commits += 1
            assert order == COMMIT_ORDER_PENDING and requested < expiry
            assert writer_time is None or (writer is not None and 0 <= writer_time <= requested)
        else:
            assert status == "ABORTED" and order is None and writer is None and writer_time is None
            assert expiry == creation + lease
            if requested >= expiry:
                assert requested >= expiry + limits.timeout_grace_ms
                timed_out += 1
    return commits, timed_out


@pytest.mark.parametrize("name", SPECS)
def test_truncations_and_transaction_details_keep_their_invariants(name: str) -> None:
    spec = SPECS[name]
    spec.validate()
    rows = generate(spec)
    truncations = check_truncations(spec, rows)
    commits, timed_out = check_txn_details(spec, rows)
    if name in ("plain", "short cycles", "long history"):
        assert truncations > len(rows.streams) // 2, "the spec should truncate, and repeatedly"
        assert commits and timed_out


def test_many_seeds() -> None:
    spec = dataclasses.replace(BASE, streams=3, epochs_per_stream=60)
    for seed in range(40):
        seeded = dataclasses.replace(spec, seed=seed)
        rows = generate(seeded)
        check_truncations(seeded, rows)
        check_txn_details(seeded, rows)


def test_the_details_leave_the_history_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Request times, writers and truncation completion times come from their own random
    stream: with every workflow step taking no time, the epochs, segments, sizes, cuts and
    completion times are the same, so refining the details never changes a seeded history."""
    rows = generate(BASE)
    done = {(r[0], r[2]): r[4] for r in rows.completed_txns}
    # A commit's latency is its completion minus its request: tens of ms typically, a tail of seconds.
    latencies = sorted(
        done[(r[0], r[2])] - r[11] for r in rows.completed_txn_details if r[10] == COMMIT_ORDER_PENDING
    )
    assert 10 <= latencies[len(latencies) // 2] <= 300 and latencies[-1] >= 1_000
    monkeypatch.setattr(StreamHistory, "_took", lambda self, latency: 0)
    instant = generate(BASE)
    for table in (
        "epochs",
        "segments",
        "sealed_size_shards",
        "retention_set",
        "completed_txns",
        "transactions",
    ):
        assert instant.table(table) == rows.table(table), table
    assert [r[2:] for r in instant.truncation_history] == [r[2:] for r in rows.truncation_history]
    assert [r[1] for r in instant.truncation_history] != [r[1] for r in rows.truncation_history]
