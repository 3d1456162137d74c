"""A create that reads a stream a concurrent deletion then removes (found by the interleaving
test with two controllers): the create used to fail an internal assertion (gRPC INTERNAL)
because each statement of its read sees the latest commits; it now creates the stream anew."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.store import queries
from app.store.streams import PgStreamStore
from app.testing.controller import Services

FIND_STREAM = queries.load("streams")["find_stream"]


class _DeletedAfterFind:
    """A connection on which the stream's deletion commits (elsewhere) right after its row is read."""

    def __init__(self, conn: Any, delete: Any) -> None:
        self._conn = conn
        self._delete = delete

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        row = await self._conn.fetchrow(sql, *args)
        if sql == FIND_STREAM and row is not None and self._delete is not None:
            delete, self._delete = self._delete, None
            await delete()
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Db:
    def __init__(self, db: Any, delete: Any) -> None:
        self._db = db
        self._delete = delete

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self._db.transaction() as conn:
            yield _DeletedAfterFind(conn, self._delete)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_create_reading_a_stream_deleted_meanwhile_creates_it_anew(services: Services) -> None:
    await services.scopes.create_scope("sc")
    config = StreamConfig(ScalingPolicy.fixed(3))
    first = await services.stream_store.create_stream_metadata("sc", "st", config, 1000)
    assert first.created

    async def delete() -> None:
        assert await services.stream_store.delete_stream("sc", "st")

    racing = PgStreamStore(_Db(services.pool, delete))  # type: ignore[arg-type]
    second = await racing.create_stream_metadata("sc", "st", config, 2000)
    assert second.created and second.state == StreamState.CREATING and second.creation_time == 2000
    # Numbered after the deleted incarnation's segments, as any re-creation is.
    assert sorted(s.number for s in second.epoch_zero.segments) == [3, 4, 5]
