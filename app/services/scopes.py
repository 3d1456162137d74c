"""Scope use cases: create, delete (non-recursive), list, exists.

Outcomes that Pravega reports as status enums come back as `ScopeOutcome` values; anything
else is a domain error for the API layer to map.
"""

from __future__ import annotations

import enum

from app.domain.errors import AlreadyExists, NotEmpty, NotFound
from app.domain.names import (
    INTERNAL_SCOPE,
    NUL,
    is_valid_scope_or_stream_name,
    require_not_internal_scope,
    require_present,
)
from app.metrics.record import operation, outcome_is
from app.ports import Clock, ScopeStore
from app.services.paging import PAGE_LIMIT, Page, decode_token, encode_token, page_of

# The token of the page that listed `_system` after every stored scope: the listing's end. It
# decodes to a string with NUL, which no scope name holds, so it cannot stand for a real position
# (and is answered before it would reach the store).
AFTER_LISTED_INTERNAL_SCOPE = encode_token(NUL + INTERNAL_SCOPE)


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
        """True for `_system` with or without a row: Pravega's controller makes that scope at start,
        and it is always listed (`list_scopes_with_internal`)."""
        require_present("scope", name)
        if name == INTERNAL_SCOPE:
            return True
        try:
            await self._scopes.get_scope_state(name)
        except NotFound:
            return False
        return True

    async def list_scopes(self, token: str, limit: int = PAGE_LIMIT) -> Page:
        after = decode_token(token)
        names = await self._scopes.list_scopes(after, min(limit, PAGE_LIMIT))
        return page_of(names, token)

    async def list_scopes_with_internal(self, token: str, limit: int = PAGE_LIMIT) -> Page:
        """The stored scopes, then `_system`, listed exactly once (a `_system` row may exist:
        createScope accepts the name, as Pravega's controller does). Pravega lists `_system` with
        the others; it comes last here, so the first scope listed is a user's (a client that lists
        the streams of the first scope finds them: `_system` holds none here, docs/compatibility.md).
        Every non-empty page carries a non-empty token; the page after `_system` is the end, empty,
        with the caller's token."""
        if token == AFTER_LISTED_INTERNAL_SCOPE:
            return Page([], token)
        limit = min(limit, PAGE_LIMIT)
        page = await self.list_scopes(token, limit)
        while True:
            names = [name for name in page.names if name != INTERNAL_SCOPE]
            if len(page.names) < limit:
                # The store's last page: `_system` ends the listing, on this page.
                return Page([*names, INTERNAL_SCOPE], AFTER_LISTED_INTERNAL_SCOPE)
            if names:
                return Page(names, page.token)
            # A full page of only a `_system` row (limit 1): more may follow it.
            page = await self.list_scopes(page.token, limit)
