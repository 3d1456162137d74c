"""Recursive scope deletion (Pravega's DeleteScopeTask): the API marked the scope DELETING
with this request; every stream in it, internal ones included, is sealed and deleted
whatever its state, then the scope itself is removed."""

from __future__ import annotations

from app.domain.errors import NotFound
from app.domain.records import ScopeState, StreamState
from app.domain.requests import Request
from workers.handlers.common import WorkflowDeps, delete_stream_and_segments, seal_segments
from workers.runner import MarkStarted


class DeleteScopeHandler:
    def __init__(self, deps: WorkflowDeps) -> None:
        self._deps = deps

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope = request.scope
        if (await self._deps.scopes.get_scope(scope)).value != ScopeState.DELETING:
            return
        await mark_started()
        for name in await self._deps.scopes.stream_names(scope):
            try:
                await self._seal_and_delete(scope, name)
            except NotFound:
                continue  # deleted meanwhile (a mark stream goes with its stream)
        await self._deps.scopes.delete_scope(scope)

    async def _seal_and_delete(self, scope: str, name: str) -> None:
        state, active = await self._deps.streams.get_active_epoch(scope, name)
        if state != StreamState.SEALED:
            await seal_segments(self._deps, scope, name, [s.id for s in active.segments])
        await delete_stream_and_segments(self._deps, scope, name, 0)
