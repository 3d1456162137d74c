"""Recursive scope deletion (Pravega's DeleteScopeTask): the API marked the scope DELETING
with this request; every stream in it, internal ones included, is sealed and deleted
whatever its state, then the scope's other members (reader groups, key-value tables) go
through their own idempotent deletions, then the scope itself is removed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from app.domain.errors import NotFound
from app.domain.records import ScopeState, StreamState
from app.domain.requests import Request
from workers.handlers.common import WorkflowDeps, delete_stream_and_segments, seal_segments
from workers.runner import MarkStarted

# Deletes every member of one kind (reader groups, KVTs) in the scope; safe to run again.
ScopeMemberDeletion = Callable[[str], Awaitable[object]]


class DeleteScopeHandler:
    def __init__(self, deps: WorkflowDeps, member_deletions: Sequence[ScopeMemberDeletion] = ()) -> None:
        self._deps = deps
        self._member_deletions = tuple(member_deletions)

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
        for delete_members in self._member_deletions:
            await delete_members(scope)
        await self._deps.scopes.delete_scope(scope)

    async def rollback(self, request: Request) -> None:
        """DELETING -> ACTIVE, so the scope takes new streams again; what was deleted stays
        deleted. Safe to repeat."""
        try:
            current = await self._deps.scopes.get_scope(request.scope)
        except NotFound:
            return
        if current.value == ScopeState.DELETING:
            await self._deps.scopes.set_scope_state(request.scope, ScopeState.ACTIVE, current.version)

    async def _seal_and_delete(self, scope: str, name: str) -> None:
        state, active = await self._deps.streams.get_active_epoch(scope, name)
        if state != StreamState.SEALED:
            await seal_segments(self._deps, scope, name, [s.id for s in active.segments])
        await delete_stream_and_segments(self._deps, scope, name, 0)
