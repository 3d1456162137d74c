"""Abort processing (Pravega's AbortRequestHandler): drop the transaction's
segments, then record ABORTED and remove the active record in one statement. Aborts have
no ordering constraints and run concurrently, even within one stream."""

from __future__ import annotations

import asyncio

from app.domain.ids import qualified_segment_name
from app.domain.requests import Request
from app.domain.txns import TxnId, TxnStatus, txn_segments
from app.metrics.record import Stopwatch
from app.metrics.registry import counter
from workers.handlers.common import WorkflowDeps
from workers.runner import MarkStarted

_ABORTED_SEGMENTS = Stopwatch("pravega_controller_transactions_aborted_segments_latency_seconds")
# Pravega's AbortRequestHandler counts and times an abort once it is done.
_ABORTED = counter("pravega_controller_transactions_aborted")
_ABORTED_LATENCY = Stopwatch("pravega_controller_transactions_aborted_latency_seconds")
_ABORT_FAILED = counter("pravega_controller_transactions_abort_failed")


class AbortTxnHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        started = _ABORTED_LATENCY.start()
        scope, name = request.scope, request.stream
        txn = TxnId(int(request.payload["txn_high"]), int(request.payload["txn_low"]))
        lookup = await self._deps.txns.get_txn(scope, name, txn)
        if lookup.active is None or lookup.active.value.status is not TxnStatus.ABORTING:
            return  # completed already (a re-delivery)
        txn_epoch = await self._deps.streams.get_epoch(scope, name, lookup.active.value.epoch)
        start = _ABORTED_SEGMENTS.start()
        await asyncio.gather(
            *(
                self._deps.segment_store.abort_transaction_segment(
                    qualified_segment_name(scope, name, parent.id), txn.high, txn.low
                )
                for parent in txn_segments(txn_epoch)
            )
        )
        _ABORTED_SEGMENTS.done(start)
        await self._deps.txns.complete_abort(
            scope, name, txn, lookup.active.version, self._deps.clock.now_ms()
        )
        _ABORTED.inc()
        _ABORTED_LATENCY.done(started)

    async def rollback(self, request: Request) -> None:
        """An abort that failed finally (the segment store refuses to drop a segment): the
        transaction ends ABORTED all the same, so it does not stay ABORTING with nothing left
        to run it; its segments are never read again. Idempotent: a completed one is left."""
        scope, name = request.scope, request.stream
        txn = TxnId(int(request.payload["txn_high"]), int(request.payload["txn_low"]))
        lookup = await self._deps.txns.get_txn(scope, name, txn)
        if lookup.active is None or lookup.active.value.status is not TxnStatus.ABORTING:
            return
        await self._deps.txns.complete_abort(
            scope, name, txn, lookup.active.version, self._deps.clock.now_ms()
        )
        _ABORT_FAILED.inc()
