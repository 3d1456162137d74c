"""The scope store port: scope records, their state and the streams they hold."""

from __future__ import annotations

from typing import Protocol

from app.domain.records import ScopeState, Versioned
from app.domain.requests import NewRequest


class ScopeStore(Protocol):
    async def create_scope(self, name: str, now_ms: int) -> None:
        """Raises AlreadyExists, also for a scope being deleted."""
        ...

    async def get_scope_state(self, name: str) -> ScopeState:
        """Raises NotFound."""
        ...

    async def delete_scope(self, name: str) -> None:
        """Raises NotFound, or NotEmpty while any stream (internal ones too) remains."""
        ...

    async def list_scopes(self, after: str, limit: int) -> list[str]:
        """Names strictly after `after` in name order; "" starts at the beginning."""
        ...

    async def get_scope(self, name: str) -> Versioned[ScopeState]: ...

    async def set_scope_state(
        self, name: str, state: ScopeState, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        """Conditional; a `request` is enqueued in the same transaction (outbox)."""
        ...

    async def stream_names(self, name: str) -> list[str]:
        """Every stream of the scope, internal ones too."""
        ...
