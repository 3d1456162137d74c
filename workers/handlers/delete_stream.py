"""Delete requests (Pravega's DeleteStreamTask): only a SEALED stream, or one left in
CREATING, is deleted; with its mark stream, its segments and its tag index entries. The
request names the incarnation (creation time), so a re-created stream is never touched."""

from __future__ import annotations

from app.domain.records import StreamState
from app.domain.requests import Request
from workers.handlers.common import WorkflowDeps, delete_stream_and_segments, log
from workers.runner import MarkStarted


class DeleteStreamHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        creation_time = int(request.payload.get("creation_time", 0))
        current = await self._deps.streams.get_creation_time(scope, name)
        if creation_time and current != creation_time:
            return
        state = (await self._deps.streams.get_state(scope, name)).value
        if state not in (StreamState.SEALED, StreamState.CREATING):
            log.warning(
                "delete request for %s/%s found it %s; streams must be sealed first", scope, name, state.value
            )
            return
        await mark_started()
        await delete_stream_and_segments(self._deps, scope, name, current)
