"""The long-term tier's index in PostgreSQL (sql/queries/tiering.sql): what the storage writer
moves and records, and the garbage queue the collector empties.

Invariant: a chunk is recorded in the same transaction that deletes the rows it holds, under the
segment's lock, and only if every row it was written from is still there and the collector has
not claimed its object; otherwise nothing changes and the object stays garbage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.ports import Clock
from app.store import queries
from app.store.chunk_packing import unpacked
from app.store.db import Database

_SQL = queries.load("tiering")


@dataclass(frozen=True)
class SegmentBacklog:
    """A segment's bytes still in PostgreSQL."""

    segment: str
    bytes: int
    sealed: bool
    kind: str

    def due(self, chunk_bytes: int) -> bool:
        """Whether the storage writer should move some of them now: a chunk's worth, or whatever
        a sealed stream segment has left (a sealed transaction's go with its merge)."""
        return self.bytes >= chunk_bytes or (self.sealed and self.kind == "stream")


@dataclass(frozen=True)
class ChunkRows:
    """Rows of one segment, contiguous from `start`, as their bytes in order."""

    start: int
    offsets: tuple[int, ...]
    pieces: tuple[bytes, ...]

    @property
    def length(self) -> int:
        return sum(map(len, self.pieces))


class PgTiering:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def backlog(self) -> list[SegmentBacklog]:
        rows = await self._db.fetch(_SQL["backlog"])
        return [
            SegmentBacklog(str(r["segment"]), int(r["bytes"]), bool(r["sealed"]), str(r["kind"]))
            for r in rows
        ]

    async def chunk_rows(self, segment: str, chunk_bytes: int) -> ChunkRows | None:
        """The oldest rows of `segment` in PostgreSQL up to about `chunk_bytes`, cut at the first
        gap (there is none unless a truncation raced the read: the move then finds it)."""
        rows = await self._db.fetch(_SQL["chunk_rows"], segment, chunk_bytes)
        if not rows:
            return None
        offsets: list[int] = []
        pieces: list[bytes] = []
        position = int(rows[0]["start_offset"])
        for row in rows:
            if int(row["start_offset"]) != position:
                break
            data = unpacked(segment, position, bytes(row["data"]), row["lz4_length"])
            offsets.append(position)
            pieces.append(data)
            position += len(data)
        return ChunkRows(offsets[0], tuple(offsets), tuple(pieces))

    async def intend(self, name: str) -> None:
        await self._db.execute(_SQL["intend"], name, self._clock.now_ms())

    async def renew_intent(self, name: str) -> bool:
        """False once the collector has claimed the object."""
        return await self._db.fetchrow(_SQL["renew_intent"], name, self._clock.now_ms()) is not None

    async def relist(self, name: str) -> bool:
        """False while the collector holds a claim on the object."""
        return await self._db.fetchrow(_SQL["relist"], name, self._clock.now_ms()) is not None

    async def record(self, segment: str, rows: ChunkRows, name: str) -> bool:
        """Moves `rows` of `segment` to object `name` in the index; False when anything changed
        since they were read (the rows, the segment, or the object claimed as garbage)."""
        try:
            return await self._record(segment, rows, name)
        except _Changed:
            return False

    async def _record(self, segment: str, rows: ChunkRows, name: str) -> bool:
        async with self._db.transaction() as conn:
            if await conn.fetchrow(_SQL["lock_segment"], segment) is None:
                return False
            moved = await conn.fetchrow(_SQL["move_rows"], segment, list(rows.offsets), name)
            if moved is None or (int(moved["intents"]), int(moved["rows"]), int(moved["bytes"])) != (
                1,
                len(rows.offsets),
                rows.length,
            ):
                raise _Changed
            await conn.execute(
                _SQL["record_chunk"], segment, rows.start, rows.length, name, self._clock.now_ms()
            )
        return True

    async def stamp_garbage(self) -> None:
        await self._db.execute(_SQL["stamp_garbage"], self._clock.now_ms())

    async def due_garbage(self, grace_ms: int, limit: int) -> list[tuple[str, int]]:
        rows = await self._db.fetch(_SQL["due_garbage"], self._clock.now_ms() - grace_ms, limit)
        return [(str(r["object"]), int(r["version"])) for r in rows]

    async def claim_garbage(self, due: Sequence[tuple[str, int]]) -> list[str]:
        rows = await self._db.fetch(_SQL["claim_garbage"], [o for o, _ in due], [v for _, v in due])
        return [str(r["object"]) for r in rows]

    async def postpone_garbage(self, objects: Sequence[str]) -> None:
        await self._db.execute(_SQL["postpone_garbage"], list(objects), self._clock.now_ms())

    async def forget_garbage(self, objects: Sequence[str]) -> None:
        await self._db.execute(_SQL["forget_garbage"], list(objects))

    async def tiered_bytes(self) -> list[tuple[str, int]]:
        return [(str(r["segment"]), int(r["bytes"])) for r in await self._db.fetch(_SQL["tiered_bytes"])]

    async def garbage_count(self) -> int:
        return int(await self._db.fetchval(_SQL["garbage_count"]))

    async def anything_tiered(self) -> bool:
        return bool(await self._db.fetchval(_SQL["any_tiered"]))


class _Changed(Exception):
    """Rolls the move back; `record` answers False."""
