"""Transaction use cases: create, ping, state, commit, abort, listings.

Commit and abort only record the decision (with the request that carries it out, in one
statement) and answer at once, as Pravega does: the merge or abort of the segments happens
in the commit and abort workers. A ping extends the lease row; the timeout sweeper reads
those rows, so no timer dies with this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import qualified_segment_name
from app.domain.records import SegmentRecord, Versioned
from app.domain.requests import NewRequest, Processor, RequestKind
from app.domain.txns import (
    CompletedTxn,
    Decision,
    Outcome,
    PingStatus,
    TxnId,
    TxnLimits,
    TxnRecord,
    TxnStatus,
    abort_decision,
    commit_decision,
    ping_decision,
    ping_of_completed,
    txn_segments,
)
from app.domain.validation import check_ping_lease, check_writer_id, check_writer_timestamp
from app.metrics.record import Stopwatch, failures, latency, operation, outcome_is
from app.ports import Clock, SegmentStore, StreamStore, TxnLookup, TxnStore

# Pravega retries a versioned txn update 3 times before the error reaches the caller.
_WRITE_ATTEMPTS = 3
LIST_COMPLETED_LIMIT = 500
_P = "pravega_controller_transactions_"
_CREATED_SEGMENTS = Stopwatch(f"{_P}created_segments_latency_seconds")


@dataclass(frozen=True, slots=True)
class CreatedTransaction:
    txn: TxnId
    # The txn epoch's segments, re-labelled with the txn epoch: what the writer writes to.
    segments: tuple[SegmentRecord, ...]


class TransactionService:
    def __init__(
        self,
        streams: StreamStore,
        txns: TxnStore,
        segment_store: SegmentStore,
        clock: Clock,
        limits: TxnLimits,
        timeouts_running: Callable[[], bool] = lambda: True,
    ) -> None:
        self._streams = streams
        self._txns = txns
        self._segment_store = segment_store
        self._clock = clock
        self._limits = limits
        self._timeouts_running = timeouts_running

    @property
    def limits(self) -> TxnLimits:
        return self._limits

    @operation("transactions", "created", "create_failed")
    async def create(self, scope: str, name: str, lease_ms: int) -> CreatedTransaction:
        """InvalidInput for a lease out of bounds, NotFound for a missing stream, IllegalState
        while it is SEALING or SEALED."""
        self._limits.check_lease(lease_ms)
        now = self._clock.now_ms()
        # The epoch is read with the insert (and its record from the cache of epochs, under the
        # stream's id): the stream's cached view goes with every change of its state, which
        # commits make twice a batch.
        created = await self._txns.create_txn(
            scope, name, None, now, lease_ms, now + self._limits.max_execution_time(lease_ms)
        )
        txn_epoch = await self._streams.get_epoch(scope, name, created.epoch, created.stream_id)
        parents = txn_segments(txn_epoch)
        txn = created.txn
        names = [qualified_segment_name(scope, name, parent.id) for parent in parents]
        # If this fails the record stays OPEN and simply times out (Pravega does the same).
        start = _CREATED_SEGMENTS.start()
        await self._segment_store.create_transaction_segments(
            names, txn.high, txn.low, created.rollover_size_bytes
        )
        _CREATED_SEGMENTS.done(start)
        await self._drop_segments_of_a_finished_txn(scope, name, txn, names)
        return CreatedTransaction(txn, parents)

    async def _drop_segments_of_a_finished_txn(
        self, scope: str, name: str, txn: TxnId, names: list[str]
    ) -> None:
        """The transaction can be aborted (its stream sealed, its lease run out) or its stream
        deleted between its row and its segments; the abort's drop of the segments then ran
        before they existed, and they would stay forever. Reading the row after creating them
        closes that window: an abort decided before this read is seen here and the segments are
        dropped now; one decided after it drops them itself, since its worker runs after the
        decision and so after the creation. Dropping twice is harmless. NotFound when the
        stream is gone."""
        try:
            lookup: TxnLookup | None = await self._txns.get_txn(scope, name, txn)
        except NotFound:
            lookup = None
        active = None if lookup is None else lookup.active
        if active is not None and active.value.status in (TxnStatus.OPEN, TxnStatus.COMMITTING):
            return
        await asyncio.gather(
            *(self._segment_store.abort_transaction_segment(n, txn.high, txn.low) for n in names)
        )
        if lookup is None:
            raise NotFound(f"stream {scope}/{name} not found")

    async def _lookup(self, scope: str, name: str, txn: TxnId) -> TxnLookup | None:
        try:
            return await self._txns.get_txn(scope, name, txn)
        except NotFound:
            return None

    async def state(self, scope: str, name: str, txn: TxnId) -> TxnStatus:
        lookup = await self._lookup(scope, name, txn)
        return TxnStatus.UNKNOWN if lookup is None else lookup.status

    async def ping(self, scope: str, name: str, txn: TxnId, lease_ms: int) -> PingStatus:
        """Pravega's pingTxn checks, in its order: timeouts not running, no longer open, lease too large,
        past the maximum execution time. The minimum lease is not enforced here (Pravega neither),
        but a lease of zero or less, which would end the transaction at once, is refused."""
        check_ping_lease(lease_ms)
        if not self._timeouts_running():
            return PingStatus.DISCONNECTED
        # One statement for an open transaction within its bounds; every other answer (and a
        # ping that lost a race) comes from reading the record.
        if await self._txns.extend_open_lease(
            scope, name, txn, lease_ms, self._clock.now_ms(), self._limits.max_lease_ms
        ):
            return PingStatus.OK
        for _ in range(_WRITE_ATTEMPTS):
            lookup = await self._lookup(scope, name, txn)
            if lookup is None:
                return PingStatus.UNKNOWN
            if lookup.active is None:
                return ping_of_completed(None if lookup.completed is None else lookup.completed.status)
            record = lookup.active.value
            now = self._clock.now_ms()
            decision = ping_decision(record.status, lease_ms, now, record.max_exec_expiry, self._limits)
            if decision is not PingStatus.OK:
                return decision
            try:
                await self._txns.extend_lease(
                    scope, name, txn, lease_ms, now + lease_ms, lookup.active.version
                )
                return PingStatus.OK
            except (WriteConflict, NotFound):
                continue
        raise WriteConflict(f"transaction {txn} kept changing while being pinged")

    # `committed` and its latency are the commit worker's (workers/handlers/commit_txns.py), as
    # they are Pravega's CommitRequestHandler's; this call records the decision.
    @failures(f"{_P}commit_failed", outcome_is(Outcome.SUCCESS))
    @latency(f"{_P}committing_latency_seconds", outcome_is(Outcome.SUCCESS))
    async def commit(
        self, scope: str, name: str, txn: TxnId, writer_id: str = "", timestamp: int | None = None
    ) -> Outcome:
        writer = writer_id or None
        check_writer_id(writer_id)
        if writer is not None and timestamp is not None:
            check_writer_timestamp("timestamp", timestamp)
        return await self._seal(
            scope,
            name,
            txn,
            TxnStatus.COMMITTING,
            commit_decision,
            NewRequest(
                RequestKind.COMMIT_TXNS, scope, name, self._clock.now_ms(), processor=Processor.COMMITS
            ),
            writer,
            # Clients send Long.MIN_VALUE for "no timestamp": only a real time is a commit time.
            timestamp if writer is not None and timestamp is not None and timestamp >= 0 else None,
        )

    # `aborted` and its latency are the abort worker's (workers/handlers/abort_txn.py).
    @failures(f"{_P}abort_failed", outcome_is(Outcome.SUCCESS))
    @latency(f"{_P}aborting_latency_seconds", outcome_is(Outcome.SUCCESS))
    async def abort(self, scope: str, name: str, txn: TxnId) -> Outcome:
        return await self._seal(
            scope,
            name,
            txn,
            TxnStatus.ABORTING,
            abort_decision,
            NewRequest(RequestKind.ABORT_TXN, scope, name, self._clock.now_ms(), processor=Processor.ABORTS),
            None,
            None,
        )

    async def _seal(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        decide: Callable[[TxnStatus], Decision],
        request: NewRequest,
        writer_id: str | None,
        commit_time: int | None,
    ) -> Outcome:
        """Idempotent on its own outcome (commit of a committing txn succeeds); FAILURE when crossing
        the other one (abort of a committing txn, commit of an aborting one) or unknown."""
        # The common case, an OPEN transaction (which every decision lets proceed), in one
        # statement; any other status is read and decided below.
        if decide(TxnStatus.OPEN) is Decision.PROCEED:
            moved = await self._txns.move_open_txn(
                scope, name, txn, target, request, writer_id=writer_id, commit_time=commit_time
            )
            if moved is not None:
                return Outcome.SUCCESS
        for _ in range(_WRITE_ATTEMPTS):
            lookup = await self._lookup(scope, name, txn)
            if lookup is None:
                return Outcome.FAILURE
            decision = decide(lookup.status)
            if decision is Decision.ALREADY:
                return Outcome.SUCCESS
            if decision is Decision.REFUSE or lookup.active is None:
                return Outcome.FAILURE
            try:
                await self._txns.move_txn(
                    scope,
                    name,
                    txn,
                    target,
                    lookup.active.version,
                    request,
                    writer_id=writer_id,
                    commit_time=commit_time,
                )
                return Outcome.SUCCESS
            except (WriteConflict, NotFound):
                continue
        raise WriteConflict(f"transaction {txn} kept changing")

    async def list_completed(self, scope: str, name: str) -> list[CompletedTxn]:
        """The most recently completed, up to 500 (Pravega's listCompletedTxn.max.records)."""
        return await self._txns.list_completed(scope, name, LIST_COMPLETED_LIMIT)

    async def list_open(self, scope: str, name: str) -> list[Versioned[TxnRecord]]:
        """Every active transaction of the stream (OPEN, COMMITTING, ABORTING)."""
        return await self._txns.list_active(scope, name)

    async def get(self, scope: str, name: str, txn: TxnId) -> TxnLookup:
        """NotFound when the stream is missing."""
        return await self._txns.get_txn(scope, name, txn)
