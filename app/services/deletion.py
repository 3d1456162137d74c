"""deleteStream and deleteScopeRecursive: the request is the intent (a sealed stream needs no
metadata step; a scope is marked DELETING with its request), then the caller waits."""

from __future__ import annotations

import enum

from app.domain.errors import FinalFailure, NotFound, WriteConflict
from app.domain.names import require_not_internal_scope, require_present
from app.domain.records import ScopeState, StreamState
from app.domain.requests import NewRequest, RequestKind
from app.metrics.record import failures, operation, outcome_is
from app.ports import ScopeStore
from app.services.stream_workflow import StreamWorkflows

_CONFLICT_ATTEMPTS = 20


class DeleteStreamOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STREAM_NOT_FOUND = "STREAM_NOT_FOUND"
    STREAM_NOT_SEALED = "STREAM_NOT_SEALED"


class DeleteScopeOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    SCOPE_NOT_FOUND = "SCOPE_NOT_FOUND"
    SCOPE_NOT_EMPTY = "SCOPE_NOT_EMPTY"


class Deletion:
    def __init__(self, scopes: ScopeStore, workflows: StreamWorkflows) -> None:
        self._scopes = scopes
        self._workflows = workflows
        self._streams = workflows.streams
        self._requests = workflows.requests
        self._clock = workflows.clock

    @operation("stream", "deleted", "delete_failed", outcome_is(DeleteStreamOutcome.SUCCESS))
    async def delete_stream(self, scope: str, name: str) -> DeleteStreamOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        try:
            state = (await self._streams.get_state(scope, name)).value
            if state not in (StreamState.SEALED, StreamState.CREATING):
                return DeleteStreamOutcome.STREAM_NOT_SEALED
            creation_time = await self._streams.get_creation_time(scope, name)
        except NotFound:
            return DeleteStreamOutcome.STREAM_NOT_FOUND
        since = self._clock.now_ms()
        await self._requests.enqueue(
            NewRequest(
                RequestKind.DELETE_STREAM,
                scope,
                name,
                self._clock.now_ms(),
                payload={"creation_time": creation_time},
            )
        )
        try:
            await self._workflows.wait(
                RequestKind.DELETE_STREAM,
                scope,
                name,
                since,
                lambda: self._is_gone(scope, name, creation_time),
            )
        except FinalFailure:
            return DeleteStreamOutcome.FAILURE  # parked: the stream stays, sealed
        return DeleteStreamOutcome.SUCCESS

    async def _is_gone(self, scope: str, name: str, creation_time: int) -> bool:
        try:
            return await self._streams.get_creation_time(scope, name) != creation_time
        except NotFound:
            return True

    @failures("pravega_controller_scope_recursive_delete_failed", outcome_is(DeleteScopeOutcome.SUCCESS))
    async def delete_scope_recursive(self, scope: str) -> DeleteScopeOutcome:
        require_present("scope", scope)
        require_not_internal_scope(scope)
        since = self._clock.now_ms()
        for _ in range(_CONFLICT_ATTEMPTS):
            try:
                current = await self._scopes.get_scope(scope)
            except NotFound:
                return DeleteScopeOutcome.SUCCESS
            if current.value == ScopeState.DELETING:
                # Pravega answers at once for a scope already being deleted.
                return DeleteScopeOutcome.SUCCESS
            request = NewRequest(RequestKind.DELETE_SCOPE, scope, "", self._clock.now_ms())
            try:
                await self._scopes.set_scope_state(
                    scope, ScopeState.DELETING, current.version, request=request
                )
                break
            except WriteConflict:
                continue
            except NotFound:
                return DeleteScopeOutcome.SUCCESS
        else:
            return DeleteScopeOutcome.FAILURE
        try:
            await self._workflows.wait(
                RequestKind.DELETE_SCOPE, scope, "", since, lambda: self._scope_gone(scope)
            )
        except FinalFailure:
            return DeleteScopeOutcome.FAILURE  # parked: the scope is ACTIVE again
        return DeleteScopeOutcome.SUCCESS

    async def _scope_gone(self, scope: str) -> bool:
        try:
            await self._scopes.get_scope(scope)
        except NotFound:
            return True
        return False
