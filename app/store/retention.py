"""Retention sets and subscribers in PostgreSQL (RetentionStore port).

Retention-set rows are insert-only and kept in recording order (a record is appended only if
newer than all); every write of the retention worker is fenced by its bucket's generation,
and subscriber records move only under their version.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from app.domain.cluster import Fence
from app.domain.errors import NotFound, WriteConflict
from app.domain.records import RetentionPolicy, RetentionType, StreamState, TruncationRecord, Versioned
from app.domain.requests import NewRequest
from app.domain.retention import StreamCutRecord, SubscriberRecord
from app.ports import RetentionContext, RetentionMember, RetentionWrite
from app.store import queries
from app.store.db import Database, Row
from app.store.errors import conflict_or_missing
from app.store.requests import insert_request
from app.store.rows import cut_from_json, cut_to_json, truncation_columns, truncation_from_row

_SQL = queries.load("retention")


def _fence_args(fence: Fence) -> tuple[str, int, int]:
    return fence.service.value, fence.bucket, fence.generation


def _outcome(row: Row | None, scope: str, name: str) -> RetentionWrite:
    assert row is not None, "the fenced writes always answer one row"
    if not row["stream_exists"]:
        raise NotFound(f"stream {scope}/{name} not found")
    if not row["owned"]:
        return RetentionWrite.FENCED
    return RetentionWrite.WRITTEN if row["written"] else RetentionWrite.UNCHANGED


def _subscriber_columns(record: SubscriberRecord) -> tuple[Any, ...]:
    """In the order of insert_subscriber's parameters and set_subscriber's: name, reader group,
    generation, truncation cut, update time."""
    return (
        record.subscriber,
        record.reader_group_id,
        record.generation,
        cut_to_json(record.truncation_stream_cut),
        record.update_time,
    )


def _subscriber_from_row(row: Row) -> Versioned[SubscriberRecord]:
    record = SubscriberRecord(
        subscriber=row["subscriber"],
        reader_group_id=uuid.UUID(str(row["reader_group_id"])),
        generation=row["generation"],
        truncation_stream_cut=cut_from_json(row["truncation_stream_cut"]),
        update_time=row["update_time"],
    )
    return Versioned(record, row["version"])


class PgRetentionStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- the retention worker's reads ----------------------------------------------------------

    async def list_members(self, buckets: Sequence[int], bucket_count: int) -> list[RetentionMember]:
        if not buckets:
            return []
        rows = await self._db.fetch(_SQL["list_members"], list(buckets), bucket_count)
        return [RetentionMember(r["scope"], r["name"], r["bucket"], r["latest"]) for r in rows]

    async def get_context(self, scope: str, name: str) -> RetentionContext:
        row = await self._db.fetchrow(_SQL["get_context"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        policy = None
        if row["retention_type"] is not None:
            policy = RetentionPolicy(
                RetentionType(row["retention_type"]), row["retention_param"], row["retention_max"]
            )
        return RetentionContext(
            state=StreamState(row["state"]),
            policy=policy,
            active_epoch=row["active_epoch"],
            truncation=Versioned(truncation_from_row(row), row["truncation_version"]),
            records=tuple(
                StreamCutRecord(int(time), int(size), cut_from_json(cut))
                for time, size, cut in row["records"]
            ),
            subscriber_cuts=tuple(cut_from_json(cut) for cut in row["subscriber_cuts"]),
        )

    # --- the retention worker's fenced writes ----------------------------------------------------

    async def add_record(
        self, scope: str, name: str, record: StreamCutRecord, fence: Fence
    ) -> RetentionWrite:
        row = await self._db.fetchrow(
            _SQL["add_record"],
            scope,
            name,
            *_fence_args(fence),
            record.recording_time,
            record.recording_size,
            cut_to_json(record.stream_cut),
        )
        return _outcome(row, scope, name)

    async def purge_records(self, scope: str, name: str, up_to_time: int, fence: Fence) -> RetentionWrite:
        row = await self._db.fetchrow(_SQL["purge_records"], scope, name, *_fence_args(fence), up_to_time)
        return _outcome(row, scope, name)

    async def start_truncation(
        self,
        scope: str,
        name: str,
        record: TruncationRecord,
        expected_version: int,
        request: NewRequest,
        fence: Fence,
    ) -> RetentionWrite:
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(
                _SQL["start_truncation"],
                scope,
                name,
                *_fence_args(fence),
                *truncation_columns(record),
                expected_version,
            )
            assert row is not None, "start_truncation always answers one row"
            if not row["stream_exists"]:
                raise NotFound(f"stream {scope}/{name} not found")
            if not row["owned"]:
                return RetentionWrite.FENCED
            if row["version"] is None:
                raise WriteConflict(f"truncation record of stream {scope}/{name} was changed concurrently")
            # The outbox: the intent and its request commit together or not at all.
            await insert_request(conn, request)
        return RetentionWrite.WRITTEN

    # --- subscribers ---------------------------------------------------------------------------

    async def list_subscribers(self, scope: str, name: str) -> list[Versioned[SubscriberRecord]]:
        rows = await self._db.fetch(_SQL["list_subscribers"], scope, name)
        if not rows:
            raise NotFound(f"stream {scope}/{name} not found")
        return [_subscriber_from_row(r) for r in rows if r["subscriber"] is not None]

    async def get_subscriber(
        self, scope: str, name: str, subscriber: str
    ) -> Versioned[SubscriberRecord] | None:
        row = await self._db.fetchrow(_SQL["get_subscriber"], scope, name, subscriber)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return None if row["subscriber"] is None else _subscriber_from_row(row)

    async def insert_subscriber(self, scope: str, name: str, record: SubscriberRecord) -> bool:
        row = await self._db.fetchrow(_SQL["insert_subscriber"], scope, name, *_subscriber_columns(record))
        assert row is not None, "insert_subscriber always answers one row"
        if not row["stream_exists"]:
            raise NotFound(f"stream {scope}/{name} not found")
        return bool(row["written"])

    async def set_subscriber(
        self, scope: str, name: str, record: SubscriberRecord, expected_version: int
    ) -> int:
        version = await self._db.fetchval(
            _SQL["set_subscriber"], scope, name, *_subscriber_columns(record), expected_version
        )
        if version is None:
            current = await self.get_subscriber(scope, name, record.subscriber)
            raise conflict_or_missing(
                current is not None, f"subscriber {record.subscriber} of {scope}/{name}"
            )
        return int(version)

    async def delete_subscriber(self, scope: str, name: str, subscriber: str, expected_version: int) -> bool:
        row = await self._db.fetchrow(_SQL["delete_subscriber"], scope, name, subscriber, expected_version)
        assert row is not None, "delete_subscriber always answers one row"
        if not row["stream_exists"]:
            raise NotFound(f"stream {scope}/{name} not found")
        if row["written"]:
            return True
        if row["present"]:
            raise WriteConflict(f"subscriber {subscriber} of {scope}/{name} was changed concurrently")
        return False
