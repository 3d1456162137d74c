"""Accounts in PostgreSQL (the AccountStore of app/security/accounts.py).

Every change is conditional on the version read: a lost race raises WriteConflict, never
overwrites another writer's password or ACL.
"""

from __future__ import annotations

from app.domain.errors import AlreadyExists, NotFound, WriteConflict
from app.security.accounts import Account
from app.store import queries
from app.store.db import Database, Row

_SQL = queries.load("accounts")


def _account(row: Row) -> Account:
    return Account(
        name=row["name"],
        password_hash=row["password_hash"],
        acl=row["acl"],
        version=row["version"],
        created_at_ms=row["created_at"],
        updated_at_ms=row["updated_at"],
    )


class PgAccountStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, name: str) -> Account | None:
        row = await self._db.fetchrow(_SQL["get_account"], name)
        return None if row is None else _account(row)

    async def list(self) -> list[Account]:
        return [_account(row) for row in await self._db.fetch(_SQL["list_accounts"])]

    async def add(self, name: str, password_hash: str, acl: str, now_ms: int) -> int:
        version = await self._db.fetchval(_SQL["add_account"], name, password_hash, acl, now_ms)
        if version is None:
            raise AlreadyExists(f"account {name!r} already exists")
        return int(version)

    async def update(
        self,
        name: str,
        expected_version: int,
        now_ms: int,
        *,
        password_hash: str | None = None,
        acl: str | None = None,
    ) -> int:
        version = await self._db.fetchval(
            _SQL["update_account"], name, expected_version, password_hash, acl, now_ms
        )
        if version is None:
            await self._raise_lost(name, expected_version)
        return int(version)

    async def remove(self, name: str, expected_version: int) -> None:
        if await self._db.fetchval(_SQL["remove_account"], name, expected_version) is None:
            await self._raise_lost(name, expected_version)

    async def _raise_lost(self, name: str, expected_version: int) -> None:
        if await self.get(name) is None:
            raise NotFound(f"account {name!r} not found")
        raise WriteConflict(f"account {name!r} changed since version {expected_version}; read it again")
