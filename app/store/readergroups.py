"""Reader-group records in PostgreSQL (ReaderGroupStore port).

A group is created together with its create request (the outbox) and only in an ACTIVE
scope; every later write names the group's id and the version read, so a write meant for a
deleted and re-created group of the same name never lands on the new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from app.domain.errors import NotFound, WriteConflict
from app.domain.readergroups import (
    Cut,
    ReaderGroupConfig,
    ReaderGroupRecord,
    ReaderGroupState,
    ScopedStream,
    StreamDataRetention,
)
from app.domain.records import ScopeState, Versioned
from app.domain.requests import NewRequest
from app.ports import ReaderGroupCreation
from app.store import queries
from app.store.db import Database, Row
from app.store.errors import conflict_or_missing
from app.store.requests import insert_request
from app.store.rows import cut_from_json, cut_to_json

_SQL = queries.load("readergroups")


def _cuts_to_json(cuts: Mapping[ScopedStream, Cut]) -> list[dict[str, Any]]:
    # A list, not an object: JSONB reorders object keys, and the streams' order is answered back.
    return [{"scope": s.scope, "stream": s.stream, "cut": cut_to_json(c)} for s, c in cuts.items()]


def _cuts_from_json(doc: list[dict[str, Any]]) -> dict[ScopedStream, Cut]:
    return {ScopedStream(e["scope"], e["stream"]): cut_from_json(e["cut"]) for e in doc}


def config_to_json(config: ReaderGroupConfig) -> dict[str, Any]:
    return {
        "groupRefreshTimeMillis": config.group_refresh_time_ms,
        "automaticCheckpointIntervalMillis": config.automatic_checkpoint_interval_ms,
        "maxOutstandingCheckpointRequest": config.max_outstanding_checkpoint_request,
        "retentionType": int(config.retention),
        "startingStreamCuts": _cuts_to_json(config.starting_stream_cuts),
        "endingStreamCuts": _cuts_to_json(config.ending_stream_cuts),
    }


def config_from_json(doc: Mapping[str, Any]) -> ReaderGroupConfig:
    return ReaderGroupConfig(
        starting_stream_cuts=_cuts_from_json(doc["startingStreamCuts"]),
        ending_stream_cuts=_cuts_from_json(doc["endingStreamCuts"]),
        group_refresh_time_ms=int(doc["groupRefreshTimeMillis"]),
        automatic_checkpoint_interval_ms=int(doc["automaticCheckpointIntervalMillis"]),
        max_outstanding_checkpoint_request=int(doc["maxOutstandingCheckpointRequest"]),
        retention=StreamDataRetention(int(doc["retentionType"])),
    )


def _record_columns(record: ReaderGroupRecord) -> tuple[Any, ...]:
    """The first parameters of create_reader_group and update_reader_group: scope, name, id,
    generation, state, configuration, updating."""
    return (
        record.scope,
        record.name,
        record.id,
        record.generation,
        record.state.value,
        config_to_json(record.config),
        record.updating,
    )


def _record_from_row(row: Row) -> Versioned[ReaderGroupRecord]:
    record = ReaderGroupRecord(
        scope=row["scope"],
        name=row["name"],
        id=uuid.UUID(str(row["id"])),
        generation=row["generation"],
        state=ReaderGroupState(row["state"]),
        config=config_from_json(row["config"]),
        updating=row["updating"],
        created_at=row["created_at"],
    )
    return Versioned(record, row["version"])


class PgReaderGroupStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create_reader_group(
        self, record: ReaderGroupRecord, request: NewRequest
    ) -> ReaderGroupCreation:
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(
                _SQL["create_reader_group"], *_record_columns(record), record.created_at
            )
            assert row is not None, "create_reader_group always answers one row"
            if row["scope_state"] in (None, ScopeState.DELETING.value):
                raise NotFound(f"scope {record.scope!r} not found")
            if row["version"] is not None:
                # The outbox: the group and its create request commit together or not at all.
                await insert_request(conn, request)
                return ReaderGroupCreation(True, Versioned(record, int(row["version"])))
            existing = await conn.fetchrow(_SQL["get_reader_group"], record.scope, record.name)
        if existing is None:
            # Taken when we inserted, gone when we looked: let the caller decide again.
            raise WriteConflict(f"reader group {record.scope}/{record.name} was changed concurrently")
        return ReaderGroupCreation(False, _record_from_row(existing))

    async def get_reader_group(self, scope: str, name: str) -> Versioned[ReaderGroupRecord] | None:
        row = await self._db.fetchrow(_SQL["get_reader_group"], scope, name)
        return None if row is None else _record_from_row(row)

    async def update_reader_group(
        self, record: ReaderGroupRecord, expected_version: int, *, request: NewRequest | None = None
    ) -> int:
        what = f"reader group {record.scope}/{record.name}"
        async with self._db.transaction() as conn:
            version = await conn.fetchval(
                _SQL["update_reader_group"], *_record_columns(record), expected_version
            )
            if version is None:
                current = await conn.fetchrow(_SQL["get_reader_group"], record.scope, record.name)
                same = current is not None and uuid.UUID(str(current["id"])) == record.id
                raise conflict_or_missing(same, what)
            if request is not None:
                await insert_request(conn, request)
        return int(version)

    async def delete_reader_group(
        self, scope: str, name: str, reader_group_id: uuid.UUID, expected_version: int
    ) -> None:
        row = await self._db.fetchrow(
            _SQL["delete_reader_group"], scope, name, reader_group_id, expected_version
        )
        assert row is not None, "delete_reader_group always answers one row"
        if not row["deleted"]:
            raise conflict_or_missing(row["present"], f"reader group {scope}/{name}")

    async def list_reader_groups(self, scope: str) -> list[str]:
        rows = await self._db.fetch(_SQL["list_reader_groups"], scope)
        if not rows:
            raise NotFound(f"scope {scope!r} not found")
        return [r["name"] for r in rows if r["name"] is not None]

    async def count_reader_groups(self, scope: str) -> int:
        count = await self._db.fetchval(_SQL["count_reader_groups"], scope)
        return int(count)
