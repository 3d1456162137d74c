"""Commit processing (Pravega's CommitRequestHandler) on the serial commit
processor: one stream's batches run one at a time, lowest epoch first, up to 100
transactions in commit-request order, each batch completed in one metadata transaction.

A request carries no batch of its own: it commits whatever is pending, batch after batch,
until nothing is. Every commit queues a request, so one run also acknowledges the stream's
other commit requests it saw queued when it began: each of those was written together with
its transaction's COMMITTING status, before the run's final "nothing pending" check, so its
transaction was committed by this run. A batch
in progress is always finished before a new one is chosen; the record remembers whether it
rolls, so a resumed batch makes the same decision after a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.cluster import Fence
from app.domain.errors import DomainError, WriteConflict
from app.domain.ids import qualified_segment_name
from app.domain.records import EpochRecord, StreamState, Versioned
from app.domain.requests import Processor, Request
from app.domain.states import check_transition
from app.domain.txns import commits_in_place, txn_parent_id, txn_segments
from app.metrics.record import Stopwatch
from app.metrics.registry import counter
from app.ports import CommitBatch, CommittingRecord, RequestQueue, TxnWriterMarks
from workers.failpoints import failpoint
from workers.handlers.common import WorkflowDeps, move_state, retry_conflicts
from workers.handlers.rolling_txns import roll_transactions
from workers.runner import MarkStarted

log = logging.getLogger("pgcontroller.requests")

MAX_TRANSACTION_COMMIT_BATCH_SIZE = 100
_COMMITTED_SEGMENTS = Stopwatch("pravega_controller_transactions_committed_segments_latency_seconds")
# Pravega's CommitRequestHandler counts and times a commit when its batch is done, from the start
# of the batch's processing; a batch of n transactions counts n (the metric's documented meaning).
_COMMITTED = counter("pravega_controller_transactions_committed")
_COMMITTED_LATENCY = Stopwatch("pravega_controller_transactions_committed_latency_seconds")
_COMMIT_FAILED = counter("pravega_controller_transactions_commit_failed")


class CommitTxnsHandler:
    def __init__(
        self,
        deps: WorkflowDeps,
        queue: RequestQueue,
        batch_size: int = MAX_TRANSACTION_COMMIT_BATCH_SIZE,
        writer_marks: TxnWriterMarks | None = None,
        fence_for: Callable[[int], Fence | None] | None = None,
    ) -> None:
        self._deps = deps
        # The request bucket's fence, so a run overtaken by a takeover acknowledges nothing
        # (None: unfenced, for single-process tests).
        self._fence_for = fence_for
        self._queue = queue
        self._batch_size = batch_size
        # Writers' marks (latest commit time per writer) of the transactions a batch commits (None: off).
        self._writer_marks = writer_marks

    async def _ack_covered(self, request: Request, covered: list[int]) -> None:
        if self._fence_for is None:
            await self._queue.ack_many(covered)
            return
        fence = self._fence_for(request.bucket)
        if fence is not None:  # else the bucket's new owner finds them, and they find nothing to do
            await self._queue.ack_many(covered, fence)

    async def started(self, request: Request) -> bool:
        """Pravega's hasTaskStarted: a stream in COMMITTING_TXN or SEALING lets commits pass
        the fairness barrier (sealing waits for them)."""
        state = (await self._deps.streams.get_state(request.scope, request.stream)).value
        return state in (StreamState.COMMITTING_TXN, StreamState.SEALING)

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        txns = self._deps.txns
        queued = await self._queue.pending_ids_for_key(Processor.COMMITS, scope, name)
        covered = [request_id for request_id in queued if request_id != request.id]
        started = False
        # After a batch the record is known (emptied, at the version its completion wrote): no
        # re-read. A stale version only costs a WriteConflict below, and then a fresh read.
        known: CommittingRecord | None = None
        while True:
            record = known if known is not None else await txns.get_committing(scope, name)
            known = None
            if record.batch is None:
                batch = await txns.next_commit_batch(scope, name, self._batch_size)
                if batch is None:
                    await _leave_committing_state(self._deps, scope, name)
                    if covered:
                        await self._ack_covered(request, covered)
                    return
                state = await _enter_committing_state(self._deps, scope, name)
                if not started:
                    await mark_started()
                    started = True
                try:
                    version = await txns.start_commit_batch(scope, name, batch, record.version)
                except WriteConflict:
                    continue
                record = CommittingRecord(batch, version)
            else:
                state = await _enter_committing_state(self._deps, scope, name)
                if not started:
                    await mark_started()
                    started = True
            known = CommittingRecord(None, await self._commit(scope, name, record, state))

    async def rollback(self, request: Request) -> None:
        """A commit that failed finally. Pravega retries commits for ever; a refusal no retry can
        fix would then hold the stream in COMMITTING_TXN, and every seal, scale and delete behind
        it, for ever. Instead the batch in progress ends ABORTED (its transaction segments dropped
        where the segment store lets us), and the stream leaves COMMITTING_TXN; the stream's other
        committing transactions keep their own queued requests. Idempotent: an emptied record has
        no batch, and the state moves only from COMMITTING_TXN."""
        scope, name = request.scope, request.stream
        record = await self._deps.txns.get_committing(scope, name)
        if record.batch is not None and record.version is not None:
            await _drop_batch_segments(self._deps, scope, name, record.batch)
            await self._deps.txns.abandon_commit_batch(
                scope, name, record.batch.txns, record.version, self._deps.clock.now_ms()
            )
            _COMMIT_FAILED.inc(len(record.batch.txns))
        await _leave_committing_state(self._deps, scope, name)

    async def _commit_times(self, scope: str, name: str, batch: CommitBatch) -> dict[str, int]:
        if self._writer_marks is None:
            return {}
        return await self._writer_marks.commit_times(scope, name, batch.txns)

    async def _place(
        self, scope: str, name: str, batch: CommitBatch, version: int
    ) -> tuple[int, dict[int, int] | None, int | None]:
        """Merges the batch into the active segments, or rolls it over to a new epoch: answers the
        record's version, the merged segments' lengths (merged in place), and the epoch its
        transactions were rolled from (rolled over)."""
        streams = self._deps.streams
        if batch.rolling_active_epoch is None:
            _state, active = await streams.get_active_epoch(scope, name)
            # Mostly the batch's own epoch: no second read (the state change that began the
            # batch dropped the stream's cached view, and with it the cached epochs' lookup).
            txn_epoch = (
                active if active.epoch == batch.epoch else await streams.get_epoch(scope, name, batch.epoch)
            )
            if commits_in_place(active, txn_epoch):
                return version, await _merge_into(self._deps, scope, name, active, batch), None
            version = await self._deps.txns.set_rolling_epoch(scope, name, active.epoch, version)
            await roll_transactions(self._deps, scope, name, active, txn_epoch, batch)
            return version, None, active.epoch
        txn_epoch = await streams.get_epoch(scope, name, batch.epoch)
        rolling_from = await streams.get_epoch(scope, name, batch.rolling_active_epoch)
        await roll_transactions(self._deps, scope, name, rolling_from, txn_epoch, batch)
        return version, None, rolling_from.epoch

    async def _commit(
        self, scope: str, name: str, record: CommittingRecord, state: Versioned[StreamState]
    ) -> int:
        """Commits the record's batch; answers the emptied record's version."""
        batch = record.batch
        version = record.version
        assert batch is not None and version is not None
        started = _COMMITTED_LATENCY.start()
        # The writers' marks are read before completion, which deletes the records that carry
        # writer ids and times, and beside the merges, which leave those records alone: a batch
        # then waits for one round trip less (the read never fails: marks are best effort).
        marks, (version, position, rolled_from) = await asyncio.gather(
            self._commit_times(scope, name, batch), self._place(scope, name, batch, version)
        )
        if marks and rolled_from is not None:
            position = await _rolled_position(self._deps, scope, name, rolled_from)
        if marks and position is not None and self._writer_marks is not None:
            await self._writer_marks.note_txn_marks(scope, name, marks, position)
        await failpoint("commit.before_complete")
        emptied = await self._deps.txns.complete_commit_batch(
            scope,
            name,
            batch.txns,
            version,
            self._deps.clock.now_ms(),
            state.version if state.value is StreamState.COMMITTING_TXN else None,
        )
        _COMMITTED.inc(len(batch.txns))
        _COMMITTED_LATENCY.done(started)
        return emptied


async def _merge_into(
    deps: WorkflowDeps, scope: str, name: str, active: EpochRecord, batch: CommitBatch
) -> dict[int, int]:
    """Each active segment takes its transactions in commit order, as one batch; segments in parallel.
    Re-merging a merged transaction adds nothing, so a resumed batch is safe. Returns each
    segment's length after the batch: the position the batch's writer marks carry."""

    async def merge_segment(segment: int) -> tuple[int, int]:
        target = qualified_segment_name(scope, name, segment)
        parent = qualified_segment_name(scope, name, txn_parent_id(segment, batch.epoch))
        return segment, await deps.segment_store.merge_transaction_segments(
            target, [(txn.high, txn.low) for txn in batch.txns], txn_parent=parent
        )

    start = _COMMITTED_SEGMENTS.start()
    merged = dict(await asyncio.gather(*(merge_segment(s.id) for s in active.segments)))
    _COMMITTED_SEGMENTS.done(start)
    return merged


async def _drop_batch_segments(deps: WorkflowDeps, scope: str, name: str, batch: CommitBatch) -> None:
    """Best effort: a segment store that refuses the drop leaves the segments behind (logged),
    which must not keep the transactions from their final state."""
    txn_epoch = await deps.streams.get_epoch(scope, name, batch.epoch)
    drops = [
        deps.segment_store.abort_transaction_segment(
            qualified_segment_name(scope, name, parent.id), txn.high, txn.low
        )
        for txn in batch.txns
        for parent in txn_segments(txn_epoch)
    ]
    for outcome in await asyncio.gather(*drops, return_exceptions=True):
        if isinstance(outcome, DomainError):
            log.warning("abandoned commit of %s/%s left a transaction segment: %s", scope, name, outcome)
        elif isinstance(outcome, BaseException):
            raise outcome


async def _rolled_position(
    deps: WorkflowDeps, scope: str, name: str, rolled_from: int
) -> dict[int, int] | None:
    """After a rolling commit the batch sits in the copies of its epoch's segments (epoch
    rolled_from + 1, sealed): their lengths are the marks' position. None when they cannot be
    read: marks from transactions are best effort, never a reason to fail the commit."""
    try:
        copies = await deps.streams.get_epoch(scope, name, rolled_from + 1)
        infos = await asyncio.gather(
            *(
                deps.segment_store.get_segment_info(qualified_segment_name(scope, name, s.id))
                for s in copies.segments
            )
        )
    except DomainError:
        return None
    return {s.id: info.length for s, info in zip(copies.segments, infos, strict=True)}


async def _enter_committing_state(deps: WorkflowDeps, scope: str, name: str) -> Versioned[StreamState]:
    """ACTIVE -> COMMITTING_TXN; left alone in COMMITTING_TXN or SEALING (commits proceed
    while sealing). OperationNotAllowed in any other state: the request is postponed."""

    async def step() -> Versioned[StreamState]:
        current = await deps.streams.get_state(scope, name)
        if current.value in (StreamState.COMMITTING_TXN, StreamState.SEALING):
            return current
        check_transition(current.value, StreamState.COMMITTING_TXN)
        version = await deps.streams.set_state(scope, name, StreamState.COMMITTING_TXN, current.version)
        return Versioned(StreamState.COMMITTING_TXN, version)

    return await retry_conflicts(step, f"state of {scope}/{name}")


async def _leave_committing_state(deps: WorkflowDeps, scope: str, name: str) -> None:
    # Re-entrancy after a crash between a batch and its state reset.
    if (await deps.streams.get_state(scope, name)).value is StreamState.COMMITTING_TXN:
        await move_state(deps.streams, scope, name, StreamState.ACTIVE)
