"""Scope use cases: create, delete (non-recursive), list, exists.

Outcomes that Pravega reports as status enums come back as `ScopeOutcome` values; anything
else is a domain error for the API layer to map.
"""

from __future__ import annotations

import enum

from app.domain.errors import AlreadyExists, NotEmpty, NotFound
from app.domain.names import is_valid_scope_or_stream_name, require_not_internal_scope, require_present
from app.metrics.record import operation, outcome_is
from app.ports import Clock, ScopeStore
from app.services.paging import PAGE_LIMIT, Page, decode_token, page_of


class ScopeOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    EXISTS = "EXISTS"
    INVALID_NAME = "INVALID_NAME"
    NOT_FOUND = "NOT_FOUND"
    NOT_EMPTY = "NOT_EMPTY"


class ScopeService:
    def __init__(self, scopes: ScopeStore, clock: Clock) -> None:
        self._scopes = scopes
        self._clock = clock

    @operation("scope", "created", "create_failed", outcome_is(ScopeOutcome.SUCCESS))
    async def create_scope(self, name: str) -> ScopeOutcome:
        require_present("scope", name)
        if not is_valid_scope_or_stream_name(name):
            return ScopeOutcome.INVALID_NAME
        try:
            await self._scopes.create_scope(name, self._clock.now_ms())
        except AlreadyExists:
            return ScopeOutcome.EXISTS
        return ScopeOutcome.SUCCESS

    @operation("scope", "deleted", "delete_failed", outcome_is(ScopeOutcome.SUCCESS))
    async def delete_scope(self, name: str) -> ScopeOutcome:
        require_present("scope", name)
        require_not_internal_scope(name)
        try:
            await self._scopes.delete_scope(name)
        except NotFound:
            return ScopeOutcome.NOT_FOUND
        except NotEmpty:
            return ScopeOutcome.NOT_EMPTY
        return ScopeOutcome.SUCCESS

    async def scope_exists(self, name: str) -> bool:
        require_present("scope", name)
        try:
            await self._scopes.get_scope_state(name)
        except NotFound:
            return False
        return True

    async def list_scopes(self, token: str, limit: int = PAGE_LIMIT) -> Page:
        after = decode_token(token)
        names = await self._scopes.list_scopes(after, min(limit, PAGE_LIMIT))
        return page_of(names, token)
