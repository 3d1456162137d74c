"""The collector of the long-term tier's garbage: objects released by a truncation or deletion,
and objects a storage writer wrote but never recorded (it crashed, or the segment changed). An
object is deleted once it has been garbage for the grace, which covers the reads that found it in
the index just before it was released; the queue row is claimed first and removed after, so a
crash in between deletes it again next time and nothing is left behind. An object whose delete
fails goes to the back of the queue, so one the store refuses for good does not stop the rest."""

from __future__ import annotations

import asyncio
import logging

from app.chunks.contract import ChunkStore, ChunkStoreError
from app.domain.errors import StoreUnavailable
from app.metrics.registry import counter
from app.store.tiering import PgTiering

log = logging.getLogger(__name__)

OBJECTS_PER_PASS = 256


class ChunkCollector:
    def __init__(self, tiering: PgTiering, chunks: ChunkStore, *, grace_ms: int, interval_s: float) -> None:
        self._tiering = tiering
        self._chunks = chunks
        self._grace_ms = grace_ms
        self._interval_s = interval_s
        self.deleted = 0
        self.failure: str | None = None

    async def run(self) -> None:
        while True:
            try:
                collected = await self.collect()
            except (StoreUnavailable, ChunkStoreError) as exc:
                if self.failure is None:
                    log.warning(
                        "chunk collector: cannot delete garbage in %s: %s", self._chunks.description, exc
                    )
                self.failure = str(exc)
                collected = 0
            else:
                self.failure = None
            if collected < OBJECTS_PER_PASS:
                await asyncio.sleep(self._interval_s)

    async def collect(self) -> int:
        """One pass: the objects deleted."""
        await self._tiering.stamp_garbage()
        due = await self._tiering.due_garbage(self._grace_ms, OBJECTS_PER_PASS)
        if not due:
            return 0
        claimed = await self._tiering.claim_garbage(due)
        deleted: list[str] = []
        for name in claimed:
            try:
                await self._chunks.delete(name)
            except ChunkStoreError:
                # One object the store will not delete must not hold up the queue behind it;
                # stopping here keeps an outage to one failed delete per pass.
                await self._tiering.postpone_garbage([name])
                await self._forget(deleted)
                raise
            deleted.append(name)
        await self._forget(deleted)
        return len(deleted)

    async def _forget(self, deleted: list[str]) -> None:
        if not deleted:
            return
        await self._tiering.forget_garbage(deleted)
        self.deleted += len(deleted)
        counter("pgcontroller_tier_objects_deleted").inc(len(deleted))
