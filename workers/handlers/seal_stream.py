"""Seal requests (Pravega's SealStreamTask): the API moved the stream to SEALING with this
request; seal every active segment, keep their final sizes, SEALING -> SEALED."""

from __future__ import annotations

from app.domain.records import StreamState
from app.domain.requests import Request
from workers.handlers.common import WorkflowDeps, log, move_state, record_sealed_sizes, seal_segments
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
        _state, active = await streams.get_active_epoch(scope, name)
        sizes = await seal_segments(self._deps, scope, name, [s.id for s in active.segments])
        await record_sealed_sizes(streams, scope, name, sizes)
        await move_state(streams, scope, name, StreamState.SEALED)
