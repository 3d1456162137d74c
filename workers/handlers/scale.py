"""Scale requests (Pravega's ScaleOperationTask): ACTIVE -> SCALING, run the pending epoch
transition, SCALING -> ACTIVE. With nothing pending (a re-delivery after completion) it only
makes sure the stream is ACTIVE again."""

from __future__ import annotations

from app.domain.records import StreamState
from app.domain.requests import Request
from workers.handlers.behind_seal import closed_by_seal
from workers.handlers.common import WorkflowDeps, drop_transition, log, move_state, restore_active
from workers.handlers.scale_steps import discard_transition, run_pending_scale
from workers.runner import MarkStarted


class ScaleHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        streams = self._deps.streams
        pending = (await streams.get_epoch_transition(request.scope, request.stream)).value
        if pending is None:
            await _back_to_active_if(self._deps, request, StreamState.SCALING)
            return
        if await closed_by_seal(streams, request.scope, request.stream):
            # Sealed after the scale was accepted: it can never run (SEALING leads only to
            # SEALED). Its transition is discarded, so checkScale stops answering IN_PROGRESS.
            log.info("scale of %s found the stream sealed; the scale is discarded", request.key)
            await discard_transition(self._deps, request.scope, request.stream, pending)
            return
        await move_state(streams, request.scope, request.stream, StreamState.SCALING)
        await mark_started()
        await run_pending_scale(
            self._deps, request.scope, request.stream, manual=bool(request.payload.get("manual", True))
        )
        await move_state(streams, request.scope, request.stream, StreamState.ACTIVE)

    # --- rollback of a parked request (a final failure) -----------------------------------------

    async def rollback(self, request: Request) -> None:
        """Removes the epoch transition record and puts the stream back to ACTIVE (checkScale then
        answers for the epoch as it is). Safe to repeat."""
        await drop_transition(self._deps.streams, request.scope, request.stream)
        await restore_active(self._deps.streams, request.scope, request.stream, StreamState.SCALING)


async def _back_to_active_if(deps: WorkflowDeps, request: Request, working_state: StreamState) -> None:
    state = (await deps.streams.get_state(request.scope, request.stream)).value
    if state == working_state:
        await move_state(deps.streams, request.scope, request.stream, StreamState.ACTIVE)
