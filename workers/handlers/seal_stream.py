"""Seal requests (Pravega's SealStreamTask): the API moved the stream to SEALING with this
request; abort the open transactions and wait (postponed) until no transaction is active,
then seal every active segment, keep their final sizes, SEALING -> SEALED."""

from __future__ import annotations

import contextlib

from app.domain.errors import NotFound, OperationNotAllowed, WriteConflict
from app.domain.records import StreamState
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.domain.txns import TxnStatus
from workers.handlers.common import (
    WorkflowDeps,
    log,
    move_state,
    record_sealed_sizes,
    restore_active,
    seal_segments,
)
from workers.runner import MarkStarted


class SealStreamHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        streams = self._deps.streams
        state = (await streams.get_state(scope, name)).value
        if state == StreamState.SEALED:
            return
        if state != StreamState.SEALING:
            log.warning(
                "seal request for %s/%s found it %s, not SEALING; nothing to do", scope, name, state.value
            )
            return
        await mark_started()
        await self._no_active_transactions(scope, name)
        _state, active = await streams.get_active_epoch(scope, name)
        sizes = await seal_segments(self._deps, scope, name, [s.id for s in active.segments])
        await record_sealed_sizes(streams, scope, name, sizes)
        await move_state(streams, scope, name, StreamState.SEALED)

    # --- rollback of a parked request (a final failure) -----------------------------------------

    async def rollback(self, request: Request) -> None:
        """SEALING -> ACTIVE, so the stream takes its other requests again (a sealed stream stays
        sealed). Safe to repeat."""
        await restore_active(self._deps.streams, request.scope, request.stream, StreamState.SEALING)

    async def _no_active_transactions(self, scope: str, name: str) -> None:
        """Asks for the abort of every open transaction; OperationNotAllowed (postpone) while
        any transaction is still open, committing or aborting: their segments must be merged
        or dropped before the stream's segments are sealed."""
        active = await self._deps.txns.list_active(scope, name)
        if not active:
            return
        now = self._deps.clock.now_ms()
        for txn in active:
            if txn.value.status is TxnStatus.OPEN:
                # Lost races are fine: the txn is being completed anyway, and we look again.
                with contextlib.suppress(WriteConflict, NotFound):
                    await self._deps.txns.move_txn(
                        scope,
                        name,
                        txn.value.txn,
                        TxnStatus.ABORTING,
                        txn.version,
                        NewRequest(RequestKind.ABORT_TXN, scope, name, now, processor=Processor.ABORTS),
                    )
        raise OperationNotAllowed(
            f"{len(active)} transaction(s) of {scope}/{name} must complete before sealing"
        )
