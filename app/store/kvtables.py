"""Key-value table records in PostgreSQL (KvtStore port).

A table row and its CREATE_KVT request commit together (outbox); every later write names the
table's incarnation (id) and the version read, so a late writer never touches a re-created table.
"""

from __future__ import annotations

from app.domain.errors import NotFound, WriteConflict
from app.domain.kvtables import KvtConfig, KvtRecord, KvtState
from app.domain.records import ScopeState, Versioned
from app.domain.requests import NewRequest
from app.ports import KvtCreation
from app.store import queries
from app.store.db import Database, Row
from app.store.requests import insert_request

_SQL = queries.load("kvtables")


def _record(row: Row) -> Versioned[KvtRecord]:
    config = KvtConfig(
        partition_count=row["partition_count"],
        primary_key_length=row["primary_key_length"],
        secondary_key_length=row["secondary_key_length"],
        rollover_size_bytes=row["rollover_size_bytes"],
    )
    record = KvtRecord(
        scope=row["scope"],
        name=row["name"],
        id=str(row["id"]),
        config=config,
        state=KvtState(row["state"]),
        creation_time=row["creation_time"],
        start_number=row["start_number"],
    )
    return Versioned(record, row["version"])


class PgKvtStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create_kvt(self, record: KvtRecord, request: NewRequest) -> KvtCreation:
        config = record.config
        async with self._db.transaction() as conn:
            scope_state = await conn.fetchval(_SQL["kvt_scope_for_share"], record.scope)
            if scope_state is None or scope_state == ScopeState.DELETING.value:
                raise NotFound(f"scope {record.scope!r} not found")
            row = await conn.fetchrow(
                _SQL["insert_kvt"],
                record.scope,
                record.name,
                record.id,
                config.partition_count,
                config.primary_key_length,
                config.secondary_key_length,
                config.rollover_size_bytes,
                record.creation_time,
            )
            if row is not None:
                await insert_request(conn, request)
                return KvtCreation(True, _record(row))
            existing = await conn.fetchrow(_SQL["get_kvt"], record.scope, record.name)
        if existing is None:
            # Deleted between our insert attempt and the read: the caller may simply try again.
            raise WriteConflict(f"key-value table {record.scope}/{record.name} changed concurrently")
        return KvtCreation(False, _record(existing))

    async def get_kvt(self, scope: str, name: str) -> Versioned[KvtRecord]:
        row = await self._db.fetchrow(_SQL["get_kvt"], scope, name)
        if row is None:
            raise NotFound(f"key-value table {scope}/{name} not found")
        return _record(row)

    async def set_kvt_state(
        self,
        scope: str,
        name: str,
        kvt_id: str,
        state: KvtState,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        async with self._db.transaction() as conn:
            version = await conn.fetchval(
                _SQL["set_kvt_state"], scope, name, kvt_id, state.value, expected_version
            )
            if version is None:
                current = await conn.fetchrow(_SQL["get_kvt"], scope, name)
                if current is None or str(current["id"]) != kvt_id:
                    raise NotFound(f"key-value table {scope}/{name} not found")
                raise WriteConflict(f"key-value table {scope}/{name} was changed concurrently")
            if request is not None:
                await insert_request(conn, request)
        return int(version)

    async def delete_kvt(self, scope: str, name: str, kvt_id: str, expected_version: int) -> bool:
        async with self._db.acquire() as conn:
            deleted = await conn.fetchval(_SQL["delete_kvt"], scope, name, kvt_id, expected_version)
            if deleted is not None:
                return True
            current = await conn.fetchrow(_SQL["get_kvt"], scope, name)
        if current is None or str(current["id"]) != kvt_id:
            return False
        raise WriteConflict(f"key-value table {scope}/{name} was changed concurrently")

    async def list_kvts(self, scope: str, after: str, limit: int) -> list[str]:
        row = await self._db.fetchrow(_SQL["list_kvts"], scope, after, limit)
        assert row is not None, "a listing always answers one row"
        if not row["scope_exists"]:
            raise NotFound(f"scope {scope!r} not found")
        return list(row["names"])

    async def count_kvts(self, scope: str) -> int:
        return int(await self._db.fetchval(_SQL["count_kvts"], scope))

    async def get_deleted_kvt(self, scope: str, name: str) -> Versioned[int] | None:
        row = await self._db.fetchrow(_SQL["get_deleted_kvt"], scope, name)
        return None if row is None else Versioned(row["last_segment_number"], row["version"])

    async def put_deleted_kvt(
        self, scope: str, name: str, last_segment_number: int, expected_version: int | None
    ) -> int:
        if expected_version is None:
            version = await self._db.fetchval(_SQL["insert_deleted_kvt"], scope, name, last_segment_number)
        else:
            version = await self._db.fetchval(
                _SQL["set_deleted_kvt"], scope, name, last_segment_number, expected_version
            )
        if version is None:
            raise WriteConflict(f"deleted-table record of {scope}/{name} was changed concurrently")
        return int(version)
