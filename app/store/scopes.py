"""Scope records in PostgreSQL (ScopeStore port).

A scope is deleted only when empty and only at the version it was read at.
"""

from __future__ import annotations

from app.domain.errors import AlreadyExists, NotEmpty, NotFound, WriteConflict
from app.domain.records import ScopeState, Versioned
from app.domain.requests import NewRequest
from app.store import queries
from app.store.db import Database
from app.store.errors import conflict_or_missing
from app.store.requests import insert_request

_SQL = queries.load("scopes")


class PgScopeStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create_scope(self, name: str, now_ms: int) -> None:
        created = await self._db.fetchval(_SQL["create_scope"], name, now_ms)
        if created is None:
            raise AlreadyExists(f"scope {name!r} already exists")

    async def get_scope(self, name: str) -> Versioned[ScopeState]:
        row = await self._db.fetchrow(_SQL["get_scope"], name)
        if row is None:
            raise NotFound(f"scope {name!r} not found")
        return Versioned(ScopeState(row["state"]), row["version"])

    async def get_scope_state(self, name: str) -> ScopeState:
        return (await self.get_scope(name)).value

    async def set_scope_state(
        self, name: str, state: ScopeState, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        """Conditional on the version; a `request` commits in the same transaction (outbox)."""
        async with self._db.transaction() as conn:
            version = await conn.fetchval(_SQL["set_scope_state"], name, state.value, expected_version)
            if version is None:
                exists = await conn.fetchval(_SQL["get_scope"], name)
                raise conflict_or_missing(exists is not None, f"scope {name!r}")
            if request is not None:
                await insert_request(conn, request)
        return int(version)

    async def stream_names(self, name: str) -> list[str]:
        """Every stream in the scope, internal ones included."""
        rows = await self._db.fetch(_SQL["scope_stream_names"], name)
        return [r["name"] for r in rows]

    async def delete_scope(self, name: str) -> None:
        try:
            row = await self._db.fetchrow(_SQL["delete_scope"], name)
        except WriteConflict as exc:
            # The FK from streams fired: a stream arrived between our check and the delete.
            raise NotEmpty(f"scope {name!r} is not empty") from exc
        assert row is not None, "delete_scope always answers one row"
        if row["found"] == 0:
            raise NotFound(f"scope {name!r} not found")
        if row["has_streams"]:
            raise NotEmpty(f"scope {name!r} is not empty")
        if row["deleted"] == 0:
            raise WriteConflict(f"scope {name!r} was changed concurrently")

    async def list_scopes(self, after: str, limit: int) -> list[str]:
        rows = await self._db.fetch(_SQL["list_scopes"], after, limit)
        return [r["name"] for r in rows]
