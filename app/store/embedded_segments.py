"""Rows of the embedded segment store (table embedded_segments), one atomic statement per call.

The embedded segment store keeps its state here so that every controller process on one
database sees the same segments, as they would with one real segment store cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.errors import IllegalState, InvalidInput, NotEmpty, NotFound
from app.ports import SegmentInfo
from app.store import queries
from app.store.db import Database

_SQL = queries.load("embedded_segments")


class PgEmbeddedSegmentRows:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self,
        names: Sequence[str],
        kind: str,
        scale_type: int,
        target_rate: int,
        rollover: int,
        key_length: int,
        now_ms: int,
    ) -> None:
        await self._db.execute(
            _SQL["create_segments"],
            list(names),
            kind,
            scale_type,
            target_rate,
            rollover,
            key_length,
            now_ms,
        )

    async def info(self, name: str) -> SegmentInfo:
        row = await self._db.fetchrow(_SQL["get_segment_info"], name)
        if row is None:
            raise NotFound(f"segment {name} does not exist")
        return SegmentInfo(row["name"], row["length"], row["start_offset"], row["sealed"])

    async def exists(self, name: str) -> bool:
        return await self._db.fetchrow(_SQL["get_segment_info"], name) is not None

    async def seal(self, name: str) -> int:
        length = await self._db.fetchval(_SQL["seal_segment"], name)
        if length is None:
            raise NotFound(f"segment {name} does not exist")
        return int(length)

    async def truncate(self, name: str, offset: int) -> None:
        start = await self._db.fetchval(_SQL["truncate_segment"], name, offset)
        if start is None:
            info = await self.info(name)
            raise InvalidInput(f"cannot truncate {name} at {offset}: its length is {info.length}")

    async def delete(self, name: str, with_suffix_like: str) -> None:
        await self._db.execute(_SQL["delete_segment"], name, with_suffix_like)

    async def update_policy(self, name: str, scale_type: int, target_rate: int) -> None:
        version = await self._db.fetchval(_SQL["update_policy"], name, scale_type, target_rate)
        if version is None:
            raise NotFound(f"segment {name} does not exist")

    async def merge(self, parent: str, txn_segments: Sequence[str]) -> int:
        length = await self._db.fetchval(_SQL["merge_transaction_segments"], parent, list(txn_segments))
        if length is None:
            info = await self.info(parent)
            raise IllegalState(f"cannot merge into sealed segment {info.name}")
        return int(length)

    async def append(self, name: str, size: int) -> int:
        length = await self._db.fetchval(_SQL["append"], name, size)
        if length is None:
            info = await self.info(name)
            raise IllegalState(f"segment {info.name} is sealed")
        return int(length)

    async def delete_table(self, name: str, must_be_empty: bool) -> None:
        deleted = await self._db.fetchval(_SQL["delete_table_segment"], name, must_be_empty)
        if deleted is None:
            row = await self._db.fetchrow(_SQL["get_segment_info"], name)
            if row is None:
                return
            if row["kind"] != "table":
                raise InvalidInput(f"segment {name} is not a table segment")
            raise NotEmpty(f"table segment {name} is not empty")
