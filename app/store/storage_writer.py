"""The storage writer: moves committed bytes of each segment from PostgreSQL to chunk objects in
the long-term tier, a chunk at a time (when a segment's bytes in PostgreSQL reach the chunk size,
and whatever is left once a stream segment is sealed).

Crash safety, step by step: the object's name is listed as garbage (committed) before it is
written; the object is written and durable; then one transaction, under the segment's lock,
deletes the rows it holds and records it, and takes its name off the garbage list. A crash
anywhere leaves either the rows in PostgreSQL (and a garbage object the collector deletes) or the
chunk recorded and the rows gone, never both and never neither."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from app.chunks.contract import ChunkStore, ChunkStoreError
from app.domain.errors import StoreUnavailable
from app.store.tiering import PgTiering

log = logging.getLogger(__name__)

CANDIDATES_PER_PASS = 64
CHUNK_PREFIX = "chunks/"


def chunk_name() -> str:
    """A fresh, never reused object name (two levels of fan-out keep directories small)."""
    unique = uuid.uuid4().hex
    return f"{CHUNK_PREFIX}{unique[:2]}/{unique}"


class StorageWriter:
    def __init__(
        self,
        tiering: PgTiering,
        chunks: ChunkStore,
        *,
        chunk_bytes: int,
        interval_s: float,
        owns: Callable[[str], bool] = lambda _segment: True,
        before_record: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """`before_record` runs between an object's write and its recording (a crash test's
        failpoint: killed there, the object must end up collected and the bytes stay readable)."""
        self._tiering = tiering
        self._chunks = chunks
        self._chunk_bytes = chunk_bytes
        self._interval_s = interval_s
        # Which segments are this store's to move (set once its container ownership exists).
        self.owns = owns
        self._before_record = before_record
        self.chunks_written = 0
        self.bytes_moved = 0
        self.moves_abandoned = 0
        # The last failure of a pass, until a pass succeeds (health reads it).
        self.failure: str | None = None

    async def run(self) -> None:
        """Passes until cancelled; an outage of either store is logged and retried, so the loop
        outlives a database restart and a chunk-store outage alike."""
        while True:
            try:
                moved = await self.flush()
            except (StoreUnavailable, ChunkStoreError) as exc:
                if self.failure is None:
                    log.warning("storage writer: cannot move data to %s: %s", self._chunks.description, exc)
                self.failure = str(exc)
                moved = 0
            else:
                if self.failure is not None:
                    log.info("storage writer: moving data to %s again", self._chunks.description)
                self.failure = None
            if not moved:
                await asyncio.sleep(self._interval_s)

    async def flush(self) -> int:
        """One pass over the segments with bytes due; the chunks it moved."""
        moved = 0
        for candidate in await self._tiering.candidates(self._chunk_bytes, CANDIDATES_PER_PASS):
            if not self.owns(candidate.segment):
                continue
            while await self._move_one(candidate.segment, candidate.sealed):
                moved += 1
        return moved

    async def _move_one(self, segment: str, sealed: bool) -> bool:
        rows = await self._tiering.chunk_rows(segment, self._chunk_bytes)
        if rows is None or (rows.length < self._chunk_bytes and not sealed):
            return False
        name = chunk_name()
        await self._tiering.intend(name)
        await self._chunks.put(name, rows.pieces)
        if self._before_record is not None:
            await self._before_record(f"{name} holds {rows.length} bytes of {segment} from {rows.start}")
        if not await self._tiering.record(segment, rows, name):
            # Truncated, merged, deleted or sealed meanwhile: the object stays garbage, and the
            # next pass looks again.
            self.moves_abandoned += 1
            return False
        self.chunks_written += 1
        self.bytes_moved += rows.length
        return True
