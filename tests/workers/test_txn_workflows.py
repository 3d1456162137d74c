"""Commit and abort processing, rolling transactions and timeouts, step by step.

No background workers run here: each test runs the pending requests of one processor itself
(one real RequestRunner attempt each, in id order), so the interleaving of commits, scales
and aborts is chosen by the test instead of by timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import pytest

from app.domain.cluster import DEFAULT_COUNTS, BucketService, Fence
from app.domain.ids import qualified_segment_name, segment_id, transaction_segment_name
from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import Processor
from app.domain.txns import Outcome, PingStatus, TxnId, TxnStatus
from app.services.scaling import CheckScaleOutcome
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.handlers import abort_handlers, commit_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner
from workers.txn_gc import CompletedTxnGc
from workers.txn_timeouts import TxnTimeoutSweeper

SC, ST = "tx", "s"
ALL_BUCKETS = list(range(DEFAULT_COUNTS.requests))
LEASE = 10_000


@pytest.fixture
async def s(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        # The timeout service must run for pings to answer (else DISCONNECTED); owning no
        # bucket here, it aborts nothing behind the tests' backs.
        sweeper = asyncio.create_task(services.txn_sweeper.run())
        await asyncio.sleep(0)
        assert services.txn_sweeper.running
        try:
            yield services
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper


def _runner(s: Services, processor: Processor) -> RequestRunner:
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    if processor is Processor.COMMITS:
        handler = CommitTxnsHandler(deps, s.requests)
        return RequestRunner(
            s.requests,
            commit_handlers(handler),
            s.clock,
            processor=processor,
            started_check=handler.started,
            max_failures=TEST_SETTINGS.request_max_failures,
        )
    if processor is Processor.ABORTS:
        return RequestRunner(
            s.requests,
            abort_handlers(deps),
            s.clock,
            processor=processor,
            barrier=False,
            max_failures=TEST_SETTINGS.request_max_failures,
        )
    return RequestRunner(
        s.requests, stream_request_handlers(deps), s.clock, max_failures=TEST_SETTINGS.request_max_failures
    )


async def run_pending(s: Services, processor: Processor) -> tuple[int, int]:
    """One attempt for each pending request of `processor`; (finished, still queued)."""
    runner = _runner(s, processor)
    finished = left = 0
    for request in await s.requests.pending(processor, ALL_BUCKETS, [], 1000):
        outcome = await runner.attempt(dataclasses.replace(request, not_before=0))
        if outcome is None:
            finished += 1
        else:
            left += 1
    return finished, left


async def run_all(s: Services) -> None:
    for _ in range(10):
        progress = 0
        for processor in Processor:
            finished, _left = await run_pending(s, processor)
            progress += finished
        if not progress:
            break
    assert not await s.requests.pending(Processor.REQUESTS, ALL_BUCKETS, [], 10)


async def make_stream(s: Services, segments: int = 1, name: str = ST) -> None:
    await s.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(segments)))


def txn_segment(txn: TxnId, parent: int, name: str = ST) -> str:
    return transaction_segment_name(qualified_segment_name(SC, name, parent), txn.high, txn.low)


async def write(s: Services, txn: TxnId, parent: int, size: int) -> None:
    await s.segment_store.append(txn_segment(txn, parent), size)


async def length(s: Services, segment: int) -> tuple[int, bool]:
    info = await s.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))
    return info.length, info.sealed


async def scale_now(s: Services, sealed: list[int], ranges: list[tuple[float, float]], epoch: int) -> None:
    outcome = await s.lifecycle.scaling.scale(SC, ST, sealed, ranges, 1_000)
    assert outcome.status.value == "STARTED"
    await run_pending(s, Processor.REQUESTS)
    assert await s.lifecycle.scaling.check_scale(SC, ST, epoch) is CheckScaleOutcome.SUCCESS


async def epochs(s: Services) -> list[tuple[int, int, list[int]]]:
    _state, active = await s.stream_store.get_active_epoch(SC, ST)
    records = await s.stream_store.get_epochs(SC, ST, 0, active.epoch)
    return [(r.epoch, r.reference_epoch, sorted(seg.id for seg in r.segments)) for r in records]


async def assert_settled(s: Services) -> None:
    """No batch in progress, no active transaction, the stream ACTIVE, no request queued."""
    assert (await s.txn_store.get_committing(SC, ST)).batch is None
    assert await s.txn_store.list_active(SC, ST) == []
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE
    for processor in Processor:
        assert await s.requests.pending(processor, ALL_BUCKETS, [], 10) == []


# --- commit in place ------------------------------------------------------------------------


async def test_commit_merges_into_the_active_segments_in_commit_order(s: Services) -> None:
    await make_stream(s, 2)
    first = (await s.transactions.create(SC, ST, LEASE)).txn
    second = (await s.transactions.create(SC, ST, LEASE)).txn
    for segment in (0, 1):
        await write(s, first, segment, 10)
        await write(s, second, segment, 3)

    assert await s.transactions.commit(SC, ST, second, "w1", 5) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, first) is Outcome.SUCCESS
    assert await s.transactions.state(SC, ST, first) is TxnStatus.COMMITTING
    records = {r.value.txn: r.value for r in await s.transactions.list_open(SC, ST)}
    assert records[second].commit_order is not None and records[first].commit_order is not None
    assert records[second].commit_order < records[first].commit_order
    assert (records[second].writer_id, records[second].commit_time) == ("w1", 5)

    assert await run_pending(s, Processor.COMMITS) == (2, 0)

    for txn in (first, second):
        assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTED
    assert await length(s, 0) == (13, False)
    assert await length(s, 1) == (13, False)
    assert await epochs(s) == [(0, 0, [0, 1])], "committing in place writes no epoch"
    await assert_settled(s)
    completed = await s.transactions.list_completed(SC, ST)
    assert {(c.txn, c.status) for c in completed} == {
        (first, TxnStatus.COMMITTED),
        (second, TxnStatus.COMMITTED),
    }


async def test_a_commit_request_commits_every_pending_batch(s: Services) -> None:
    await make_stream(s)
    txns = [(await s.transactions.create(SC, ST, LEASE)).txn for _ in range(5)]
    for txn in txns:
        await write(s, txn, 0, 1)
        await s.transactions.commit(SC, ST, txn)
    late = (await s.transactions.create(SC, ST, LEASE)).txn
    handler = CommitTxnsHandler(
        WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store),
        s.requests,
        batch_size=2,
    )
    runner = commit_runner(s, handler)
    pending = await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)
    assert len(pending) == 5
    assert await runner.attempt(pending[0]) is None
    # Three batches of at most two ran under the first request, which also acknowledged the
    # four requests queued with it: their transactions are committed.
    assert all([await s.transactions.state(SC, ST, t) is TxnStatus.COMMITTED for t in txns])
    assert await length(s, 0) == (5, False)
    assert await s.transactions.state(SC, ST, late) is TxnStatus.OPEN, "an open one is left alone"
    assert await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10) == []
    # A request that was already in memory when it was acknowledged finds nothing to do.
    assert await runner.attempt(pending[1]) is None
    assert await length(s, 0) == (5, False)
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE


async def test_commit_is_idempotent_and_crossing_fails(s: Services) -> None:
    await make_stream(s)
    committed = (await s.transactions.create(SC, ST, LEASE)).txn
    aborted = (await s.transactions.create(SC, ST, LEASE)).txn
    assert await s.transactions.commit(SC, ST, committed) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, committed) is Outcome.SUCCESS
    assert await s.transactions.abort(SC, ST, committed) is Outcome.FAILURE
    assert await s.transactions.abort(SC, ST, aborted) is Outcome.SUCCESS
    assert await s.transactions.abort(SC, ST, aborted) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, aborted) is Outcome.FAILURE
    assert len(await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)) == 1
    assert len(await s.requests.pending(Processor.ABORTS, ALL_BUCKETS, [], 10)) == 1

    await run_all(s)
    # The same answers once the outcomes are final.
    assert await s.transactions.commit(SC, ST, committed) is Outcome.SUCCESS
    assert await s.transactions.abort(SC, ST, committed) is Outcome.FAILURE
    assert await s.transactions.abort(SC, ST, aborted) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, aborted) is Outcome.FAILURE
    assert await s.transactions.ping(SC, ST, committed, LEASE) is PingStatus.COMMITTED
    assert await s.transactions.ping(SC, ST, aborted, LEASE) is PingStatus.ABORTED
    unknown = TxnId(0, 999_999)
    assert await s.transactions.commit(SC, ST, unknown) is Outcome.FAILURE
    assert await s.transactions.abort(SC, ST, unknown) is Outcome.FAILURE
    assert await s.transactions.state(SC, ST, unknown) is TxnStatus.UNKNOWN
    await assert_settled(s)


async def test_abort_drops_the_transaction_segments(s: Services) -> None:
    await make_stream(s, 2)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, txn, 0, 7)
    assert await s.transactions.abort(SC, ST, txn) is Outcome.SUCCESS
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTING
    assert await run_pending(s, Processor.ABORTS) == (1, 0)
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
    for parent in (0, 1):
        with pytest.raises(Exception, match="not"):
            await s.segment_store.get_segment_info(txn_segment(txn, parent))
    assert await length(s, 0) == (0, False)
    await assert_settled(s)


# --- ordering across epochs and rolling transactions -------------------------------------------


async def test_commits_go_epoch_by_epoch_and_an_old_epoch_rolls(s: Services) -> None:
    await make_stream(s, 1)
    t1 = (await s.transactions.create(SC, ST, LEASE)).txn
    t2 = (await s.transactions.create(SC, ST, LEASE)).txn
    await scale_now(s, [0], [(0.0, 1.0)], 0)
    new = segment_id(1, 1)
    created = await s.transactions.create(SC, ST, LEASE)
    t3 = created.txn
    assert (t1.epoch, t2.epoch, t3.epoch) == (0, 0, 1)
    assert [seg.id for seg in created.segments] == [new]
    await write(s, t1, 0, 10)
    await write(s, t2, 0, 20)
    await write(s, t3, new, 5)

    # The newer epoch's commit is requested first; the older epoch still goes first.
    for txn in (t3, t1, t2):
        assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
    assert await run_pending(s, Processor.COMMITS) == (3, 0)

    copy_of_0, copy_of_1 = segment_id(0, 2), segment_id(1, 3)
    assert await epochs(s) == [(0, 0, [0]), (1, 1, [new]), (2, 0, [copy_of_0]), (3, 1, [copy_of_1])]
    assert await length(s, copy_of_0) == (30, True), "epoch 2 holds the epoch-0 commits, sealed"
    assert await length(s, new) == (0, True), "nothing was merged into the old active segment"
    assert await length(s, copy_of_1) == (5, False), "the epoch-1 commit landed in epoch 3"
    current = await s.segments.current_segments(SC, ST)
    assert [seg.id for seg in current] == [copy_of_1]
    # Successors walk the copies in order: epoch 1 -> epoch 2 (the commits) -> epoch 3.
    assert [seg.id for seg, _ in await s.lifecycle.history.successors(SC, ST, new)] == [copy_of_0]
    assert [seg.id for seg, _ in await s.lifecycle.history.successors(SC, ST, copy_of_0)] == [copy_of_1]
    for txn in (t1, t2, t3):
        assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTED
    await assert_settled(s)

    # A transaction created now carries the active epoch's reference (1) and commits in place.
    later = (await s.transactions.create(SC, ST, LEASE)).txn
    assert later.epoch == 1
    await write(s, later, new, 4)
    await s.transactions.commit(SC, ST, later)
    await run_pending(s, Processor.COMMITS)
    assert await length(s, copy_of_1) == (9, False)
    assert len(await epochs(s)) == 4, "no new epochs for a commit on a duplicate's reference"


async def test_a_transaction_from_before_two_scales_rolls_over_the_newest(s: Services) -> None:
    await make_stream(s, 2)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, txn, 0, 11)
    await write(s, txn, 1, 22)
    await scale_now(s, [0, 1], [(0.0, 0.5), (0.5, 1.0)], 0)
    await scale_now(s, [segment_id(2, 1), segment_id(3, 1)], [(0.0, 0.3), (0.3, 1.0)], 1)
    history_before = await epochs(s)

    assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
    await run_pending(s, Processor.COMMITS)

    after = await epochs(s)
    assert after[:3] == history_before
    assert after[3] == (3, 0, [segment_id(0, 3), segment_id(1, 3)])
    assert after[4] == (4, 2, [segment_id(4, 4), segment_id(5, 4)])
    assert await length(s, segment_id(0, 3)) == (11, True)
    assert await length(s, segment_id(1, 3)) == (22, True)

    async def successors(segment: int) -> list[int]:
        return sorted(seg.id for seg, _ in await s.lifecycle.history.successors(SC, ST, segment))

    # Epoch 2 -> its copy of epoch 0 holding the commit (epoch 3) -> the copy of epoch 2 (4).
    assert await successors(segment_id(4, 2)) == [segment_id(0, 3)]
    assert await successors(segment_id(5, 2)) == [segment_id(0, 3), segment_id(1, 3)]
    assert await successors(segment_id(0, 3)) == [segment_id(4, 4), segment_id(5, 4)]
    assert await successors(segment_id(1, 3)) == [segment_id(5, 4)]
    assert (await s.stream_store.get_current_epoch_pointer(SC, ST)).value == 4
    events = await s.lifecycle.history.scaling_events(SC, ST, 0, 2**62)
    assert len(events) == 5
    assert [sorted(seg.id for seg in e.segments) for e in events[-2:]] == [after[3][2], after[4][2]]
    await assert_settled(s)


async def test_a_pending_manual_scale_is_carried_over_a_rolling_commit(s: Services) -> None:
    await make_stream(s, 1)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await scale_now(s, [0], [(0.0, 1.0)], 0)
    await s.transactions.commit(SC, ST, txn)
    # A manual scale submitted on epoch 1 waits while the commit rolls to epochs 2 and 3.
    outcome = await s.lifecycle.scaling.scale(SC, ST, [segment_id(1, 1)], [(0.0, 0.5), (0.5, 1.0)], 2_000)
    assert outcome.status.value == "STARTED"
    assert await run_pending(s, Processor.COMMITS) == (1, 0)
    assert [e[0] for e in await epochs(s)] == [0, 1, 2, 3]

    await run_pending(s, Processor.REQUESTS)

    final = await epochs(s)
    assert final[4] == (4, 4, [segment_id(2, 4), segment_id(3, 4)]), "the scale finished as epoch 4"
    assert await s.lifecycle.scaling.check_scale(SC, ST, 1) is CheckScaleOutcome.SUCCESS
    assert await length(s, segment_id(1, 3)) == (0, True)
    await assert_settled(s)


async def test_commit_waits_for_a_running_scale_then_rolls(s: Services) -> None:
    await make_stream(s, 1)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, txn, 0, 9)
    await s.transactions.commit(SC, ST, txn)
    outcome = await s.lifecycle.scaling.scale(SC, ST, [0], [(0.0, 0.5), (0.5, 1.0)], 1_000)
    assert outcome.status.value == "STARTED"
    # The scale has taken the stream (its first two steps) when the commit request runs.
    state = await s.stream_store.get_state(SC, ST)
    await s.stream_store.set_state(SC, ST, StreamState.SCALING, state.version)
    (scale,) = await s.requests.pending(Processor.REQUESTS, ALL_BUCKETS, [], 10)
    await s.requests.mark_started(scale)

    assert await run_pending(s, Processor.COMMITS) == (0, 1), "postponed while SCALING"
    waiting = await s.requests.get_waiting_processor(SC, ST)
    assert waiting is not None and waiting.value == Processor.COMMITS.value
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTING

    assert await run_pending(s, Processor.REQUESTS) == (1, 0)
    assert await run_pending(s, Processor.COMMITS) == (1, 0)

    assert await epochs(s) == [
        (0, 0, [0]),
        (1, 1, [segment_id(1, 1), segment_id(2, 1)]),
        (2, 0, [segment_id(0, 2)]),
        (3, 1, [segment_id(1, 3), segment_id(2, 3)]),
    ]
    assert await length(s, segment_id(0, 2)) == (9, True)
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTED
    assert await s.lifecycle.scaling.check_scale(SC, ST, 0) is CheckScaleOutcome.SUCCESS
    assert await s.requests.get_waiting_processor(SC, ST) is None
    await assert_settled(s)


async def test_a_resumed_batch_keeps_its_rolling_decision(s: Services) -> None:
    """A batch that decided to roll and crashed after moving the pointer rolls over the same
    epochs on the retry, instead of rolling again from the new active epoch."""
    await make_stream(s, 1)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, txn, 0, 6)
    await scale_now(s, [0], [(0.0, 1.0)], 0)
    await s.transactions.commit(SC, ST, txn)
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    # Replay the first run's steps up to the pointer move, as if it crashed right after.
    batch = await s.txn_store.next_commit_batch(SC, ST, 100)
    assert batch is not None
    version = await s.txn_store.start_commit_batch(SC, ST, batch, None)
    await s.txn_store.set_rolling_epoch(SC, ST, 1, version)
    state = await s.stream_store.get_state(SC, ST)
    await s.stream_store.set_state(SC, ST, StreamState.COMMITTING_TXN, state.version)
    from workers.handlers.rolling_txns import roll_transactions

    _state, active = await s.stream_store.get_active_epoch(SC, ST)
    txn_epoch = await s.stream_store.get_epoch(SC, ST, 0)
    await roll_transactions(deps, SC, ST, active, txn_epoch, batch)
    assert (await s.stream_store.get_current_epoch_pointer(SC, ST)).value == 3

    assert await run_pending(s, Processor.COMMITS) == (1, 0)
    assert [e[0] for e in await epochs(s)] == [0, 1, 2, 3], "no second roll"
    assert await length(s, segment_id(0, 2)) == (6, True), "merged exactly once"
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTED
    await assert_settled(s)


# --- sealing, timeouts, GC ----------------------------------------------------------------------


async def test_seal_aborts_open_transactions_and_waits_for_committing_ones(s: Services) -> None:
    await make_stream(s, 1)
    open_txn = (await s.transactions.create(SC, ST, LEASE)).txn
    committing = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, committing, 0, 8)
    await s.transactions.commit(SC, ST, committing)
    state = await s.stream_store.get_state(SC, ST)
    from app.domain.requests import NewRequest, RequestKind

    await s.stream_store.set_state(
        SC, ST, StreamState.SEALING, state.version, request=NewRequest(RequestKind.SEAL_STREAM, SC, ST, 1)
    )
    with pytest.raises(Exception, match="SEALING"):
        await s.transactions.create(SC, ST, LEASE)

    assert await run_pending(s, Processor.REQUESTS) == (0, 1), "the seal waits for the transactions"
    assert await s.transactions.state(SC, ST, open_txn) is TxnStatus.ABORTING
    # Commits pass the seal's fairness barrier and proceed without changing the state.
    assert await run_pending(s, Processor.COMMITS) == (1, 0)
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.SEALING
    assert await run_pending(s, Processor.ABORTS) == (1, 0)
    assert await run_pending(s, Processor.REQUESTS) == (1, 0)

    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.SEALED
    assert await s.transactions.state(SC, ST, committing) is TxnStatus.COMMITTED
    assert await s.transactions.state(SC, ST, open_txn) is TxnStatus.ABORTED
    assert await length(s, 0) == (8, True)


async def test_expired_transactions_are_aborted_unless_pinged(s: Services) -> None:
    await make_stream(s)
    expiring = (await s.transactions.create(SC, ST, 1_000)).txn
    pinged = (await s.transactions.create(SC, ST, 1_000)).txn
    sweeper = TxnTimeoutSweeper(s.txn_store, s.clock, lambda: frozenset(ALL_BUCKETS), s.transactions.limits)
    assert await sweeper.sweep_once() == 0, "nothing has expired yet"

    lookup = await s.txn_store.get_txn(SC, ST, expiring)
    assert lookup.active is not None
    expiry = lookup.active.value.lease_expiry
    # Move the clock past the lease; the ping extends one of them first.
    s.clock.now_ms = lambda: expiry + 100  # type: ignore[method-assign]
    assert await s.transactions.ping(SC, ST, pinged, 1_000) is PingStatus.OK
    assert await sweeper.sweep_once() == 1
    assert await s.transactions.state(SC, ST, expiring) is TxnStatus.ABORTING
    assert await s.transactions.state(SC, ST, pinged) is TxnStatus.OPEN
    assert await s.transactions.ping(SC, ST, expiring, 1_000) is PingStatus.ABORTED
    assert await s.transactions.commit(SC, ST, expiring) is Outcome.FAILURE
    await run_pending(s, Processor.ABORTS)
    assert await s.transactions.state(SC, ST, expiring) is TxnStatus.ABORTED

    # An owner of no bucket aborts nothing.
    s.clock.now_ms = lambda: expiry + 10_000  # type: ignore[method-assign]
    idle = TxnTimeoutSweeper(s.txn_store, s.clock, frozenset, s.transactions.limits)
    assert await idle.sweep_once() == 0
    assert await s.transactions.state(SC, ST, pinged) is TxnStatus.OPEN


async def test_a_stale_sweep_does_not_abort_a_pinged_transaction(s: Services) -> None:
    await make_stream(s)
    txn = (await s.transactions.create(SC, ST, 1_000)).txn
    lookup = await s.txn_store.get_txn(SC, ST, txn)
    assert lookup.active is not None
    s.clock.now_ms = lambda: lookup.active.value.lease_expiry + 100  # type: ignore[method-assign, union-attr]
    (expired,) = await s.txn_store.expired(ALL_BUCKETS, s.clock.now_ms(), 10)
    assert await s.transactions.ping(SC, ST, txn, 5_000) is PingStatus.OK
    # The sweep's abort presents the version it read: the ping's newer lease wins.
    from app.domain.errors import WriteConflict
    from app.domain.requests import NewRequest, RequestKind

    with pytest.raises(WriteConflict):
        await s.txn_store.move_txn(
            SC,
            ST,
            txn,
            TxnStatus.ABORTING,
            expired.version,
            NewRequest(RequestKind.ABORT_TXN, SC, ST, 1, processor=Processor.ABORTS),
        )
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.OPEN


async def test_ping_checks_in_order(s: Services) -> None:
    await make_stream(s)
    txn = (await s.transactions.create(SC, ST, 10)).txn  # max execution time 10 s
    limits = s.transactions.limits
    assert await s.transactions.ping(SC, ST, txn, limits.max_lease_ms + 1) is PingStatus.LEASE_TOO_LARGE
    assert await s.transactions.ping(SC, ST, txn, 10_001) is PingStatus.MAX_EXECUTION_TIME_EXCEEDED
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.OPEN
    assert await s.transactions.ping(SC, ST, txn, 1) is PingStatus.OK, "the minimum lease is not checked"
    assert await s.transactions.ping(SC, ST, TxnId(txn.high, txn.low + 1), 100) is PingStatus.UNKNOWN
    await make_stream(s, name="other")
    assert await s.transactions.ping(SC, "other", txn, 100) is PingStatus.UNKNOWN


async def test_completed_records_live_between_one_and_two_ttls(s: Services) -> None:
    await make_stream(s)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await s.transactions.abort(SC, ST, txn)
    await run_pending(s, Processor.ABORTS)
    (record,) = await s.transactions.list_completed(SC, ST)
    ttl = s.transactions.limits.completed_ttl_ms
    gc = CompletedTxnGc(s.txn_store, s.clock, s.transactions.limits)
    batch_start = (record.completion_time // ttl) * ttl

    s.clock.now_ms = lambda: batch_start + 2 * ttl - 1  # type: ignore[method-assign]
    assert await gc.collect_once() == 0, "kept through the next batch"
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
    s.clock.now_ms = lambda: batch_start + 2 * ttl  # type: ignore[method-assign]
    assert await gc.collect_once() == 1
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.UNKNOWN
    assert await s.transactions.ping(SC, ST, txn, 100) is PingStatus.UNKNOWN


async def test_ping_says_disconnected_while_the_timeout_service_is_not_running(db_url: str) -> None:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        await make_stream(services)
        txn = (await services.transactions.create(SC, ST, LEASE)).txn
        assert not services.txn_sweeper.running
        assert await services.transactions.ping(SC, ST, txn, LEASE) is PingStatus.DISCONNECTED
        assert await services.transactions.state(SC, ST, txn) is TxnStatus.OPEN


async def test_a_run_that_lost_its_bucket_leaves_the_covered_requests_to_the_new_owner(s: Services) -> None:
    await make_stream(s)
    txns = [(await s.transactions.create(SC, ST, LEASE)).txn for _ in range(3)]
    for txn in txns:
        await write(s, txn, 0, 1)
        await s.transactions.commit(SC, ST, txn)
    pending = await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)
    assert len(pending) == 3
    bucket = pending[0].bucket
    await s.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) VALUES ('requests', $1, 'new', 2)",
        bucket,
    )
    stale = Fence(BucketService.REQUESTS, bucket, 1)
    handler = CommitTxnsHandler(
        WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store),
        s.requests,
        fence_for=lambda _bucket: stale,
    )

    async def no_op() -> None:
        return None

    await handler.handle(pending[0], no_op)
    # The work is done (idempotent for whoever runs next), but the stale run acknowledged none
    # of the requests it covered: they are the new owner's to find and finish as no-ops.
    assert all([await s.transactions.state(SC, ST, t) is TxnStatus.COMMITTED for t in txns])
    left = {r.id for r in await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)}
    assert left == {r.id for r in pending}  # its own request is the runner's to acknowledge
    fresh = dataclasses.replace(stale, generation=2)
    handler = CommitTxnsHandler(
        WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store),
        s.requests,
        fence_for=lambda _bucket: fresh,
    )
    await handler.handle(pending[0], no_op)
    left = {r.id for r in await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)}
    assert left == {pending[0].id}


def commit_runner(s: Services, handler: CommitTxnsHandler) -> RequestRunner:
    """The commit processor's runner around `handler`, as the wiring builds it (no buckets)."""
    return RequestRunner(
        s.requests,
        commit_handlers(handler),
        s.clock,
        processor=Processor.COMMITS,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
