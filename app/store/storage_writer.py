"""The storage writer: moves committed bytes of each segment from PostgreSQL to chunk objects in
the long-term tier, a chunk at a time (when a segment's bytes in PostgreSQL reach the chunk size;
whatever is left once a stream segment is sealed; and whatever it holds once it has held bytes
for the flush age, so a segment written slowly, or no more, does not keep its tail in PostgreSQL).

Crash safety, step by step: the object's name is listed as garbage (committed) before it is
written; the object is written and durable; then one transaction, under the segment's lock,
deletes the rows it holds and records it, and takes its name off the garbage list. A crash
anywhere leaves either the rows in PostgreSQL (and a garbage object the collector deletes) or the
chunk recorded and the rows gone, never both and never neither. While the object is being
written, the writer keeps starting its grace again, so a write slower than the grace is not
collected from under it; and an object written but not recorded is listed as garbage again after
the write, in case the collector deleted its name (the writer could not reach the database to renew
it) before the write landed. What is left: a writer killed in just that window leaves its object.

Each pass starts from every segment's bytes in PostgreSQL: they give the candidates, each
container's backlog (the throttle's input and the metrics); kept between passes is only since when
each segment has held bytes here (as this process saw it: a restart counts the age afresh)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from app.chunks.contract import ChunkStore, ChunkStoreError
from app.domain.errors import StoreUnavailable
from app.metrics.registry import counter, gauge
from app.store.tier_throttle import TierThrottle
from app.store.tiering import PgTiering, SegmentBacklog
from app.waiting import wait_event

log = logging.getLogger(__name__)

CHUNK_PREFIX = "chunks/"
# The tiered bytes per container read the whole index; every pass would be wasteful.
TIERED_BYTES_EVERY_S = 10.0


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
        max_age_s: float = float("inf"),
        container_of: Callable[[str], int] = lambda _segment: 0,
        throttle: TierThrottle | None = None,
        before_record: Callable[[str], Awaitable[None]] | None = None,
        renew_every_s: float = 20.0,
    ) -> None:
        """`before_record` runs between an object's write and its recording (a crash test's
        failpoint: killed there, the object must end up collected and the bytes stay readable).
        `renew_every_s` must be well under the collector's grace (a third of it, as served)."""
        self._tiering = tiering
        self._chunks = chunks
        self._chunk_bytes = chunk_bytes
        self._interval_s = interval_s
        self._max_age_s = max_age_s
        # Since when (monotonic) each segment has held bytes in PostgreSQL not yet moved.
        self._held_since: dict[str, float] = {}
        self._container_of = container_of
        self._throttle = throttle
        self._before_record = before_record
        self._renew_every_s = renew_every_s
        # Objects written and not recorded that the collector held a claim on when they were
        # listed again: tried again each pass until listed (or claimed and forgotten first).
        self._to_relist: set[str] = set()
        # Which segments are this store's to move (set once its container ownership exists).
        self.owns: Callable[[str], bool] = lambda _segment: True
        self.chunks_written = 0
        self.bytes_moved = 0
        self.moves_abandoned = 0
        # The last failure of a pass, until a pass succeeds (health reads it).
        self.failure: str | None = None
        self._caught_up_at: dict[int, float] = {}
        self._containers_seen: set[int] = set()
        self._tiered_counted_at = float("-inf")

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
        for name in sorted(self._to_relist):
            await self._relist(name)
        backlog = [b for b in await self._tiering.backlog() if self.owns(b.segment)]
        aged = self._aged(backlog)
        await self._publish(backlog, aged)
        due = sorted(
            (b for b in backlog if b.due(self._chunk_bytes) or b.segment in aged), key=lambda b: -b.bytes
        )
        if not due:
            return 0
        moved = 0
        # A chunk write can take long (a chunk store that does not answer, or whose client is
        # retrying): meanwhile the throttle must hear the backlog grow, or the writers it exists
        # to slow fill PostgreSQL at full speed until the write gives up.
        passing = asyncio.Event()
        watching = asyncio.create_task(self._keep_publishing(passing))
        try:
            for segment in due:
                # Aged: what it holds goes now, in one chunk however small; then only the size rule.
                whole = segment.segment in aged
                while await self._move_one(segment.segment, segment.sealed or whole):
                    moved += 1
                    if whole:
                        self._held_since[segment.segment] = time.monotonic()
                        whole = False
        finally:
            # Let a count in progress finish rather than cancel its query mid-way.
            passing.set()
            await watching
        if moved:
            # Throttled appends learn at once that their container is under its bound again.
            backlog = [b for b in await self._tiering.backlog() if self.owns(b.segment)]
            await self._publish(backlog, self._aged(backlog))
        return moved

    def _aged(self, backlog: Sequence[SegmentBacklog]) -> frozenset[str]:
        """The segments that have held bytes in PostgreSQL for the flush age (tables never)."""
        now = time.monotonic()
        held = {b.segment for b in backlog}
        for gone in self._held_since.keys() - held:
            del self._held_since[gone]
        return frozenset(
            b.segment
            for b in backlog
            if b.kind == "stream" and now - self._held_since.setdefault(b.segment, now) >= self._max_age_s
        )

    async def _move_one(self, segment: str, whole: bool) -> bool:
        """Moves the segment's oldest chunk's worth of rows; with `whole`, even fewer bytes."""
        rows = await self._tiering.chunk_rows(segment, self._chunk_bytes)
        if rows is None or (rows.length < self._chunk_bytes and not whole):
            return False
        name = chunk_name()
        await self._tiering.intend(name)
        try:
            async with self._renewing(name):
                await self._chunks.put(name, rows.pieces)
        except ChunkStoreError:
            await self._relist(name)  # a write that failed may still have landed
            raise
        if self._before_record is not None:
            await self._before_record(f"{name} holds {rows.length} bytes of {segment} from {rows.start}")
        if not await self._tiering.record(segment, rows, name):
            # Truncated, merged, deleted or sealed meanwhile (or collected mid-write): the object is
            # garbage, and the next pass looks again.
            await self._relist(name)
            self.moves_abandoned += 1
            return False
        self.chunks_written += 1
        self.bytes_moved += rows.length
        counter("pgcontroller_tier_chunks_written").inc()
        counter("pgcontroller_tier_bytes_moved").inc(rows.length)
        return True

    @contextlib.asynccontextmanager
    async def _renewing(self, name: str) -> AsyncIterator[None]:
        written = asyncio.Event()
        renewing = asyncio.create_task(self._keep_renewing(name, written))
        try:
            yield
        finally:
            # A renewal in progress finishes rather than have its query cancelled mid-way.
            written.set()
            await renewing

    async def _keep_renewing(self, name: str, written: asyncio.Event) -> None:
        while not await wait_event(written, self._renew_every_s):
            try:
                if not await self._tiering.renew_intent(name):
                    return  # claimed: the record will fail, and the object be listed again
            except StoreUnavailable:
                continue

    async def _relist(self, name: str) -> None:
        """Lists `name` as garbage from now. While the collector holds a claim on it, its delete
        may have gone before the write landed: the name is tried again each pass until listed, or
        until the collector forgot it and it could be listed afresh."""
        self._to_relist.add(name)  # kept through a database outage too
        if await self._tiering.relist(name):
            self._to_relist.discard(name)

    async def _keep_publishing(self, passed: asyncio.Event) -> None:
        """Each interval until `passed` is set: the backlog counted again and published. A
        database outage meanwhile is the pass's to report; this waits for the next interval."""
        while not await wait_event(passed, self._interval_s):
            try:
                backlog = [b for b in await self._tiering.backlog() if self.owns(b.segment)]
            except StoreUnavailable:
                continue
            await self._publish(backlog, self._aged(backlog))

    async def _publish(self, backlog: Sequence[SegmentBacklog], aged: frozenset[str]) -> None:
        """Each container's backlog to the throttle and the gauges."""
        in_pg: dict[int, int] = {}
        due: dict[int, int] = {}
        for segment in backlog:
            container = self._container_of(segment.segment)
            in_pg[container] = in_pg.get(container, 0) + segment.bytes
            if segment.due(self._chunk_bytes) or segment.segment in aged:
                due[container] = due.get(container, 0) + segment.bytes
        if self._throttle is not None:
            self._throttle.update(due)
        now = time.monotonic()
        for container in self._containers_seen | in_pg.keys():
            label = str(container)
            gauge("pgcontroller_tier_postgres_bytes").labels(label).set(in_pg.get(container, 0))
            gauge("pgcontroller_tier_due_bytes").labels(label).set(due.get(container, 0))
            if not due.get(container):
                self._caught_up_at[container] = now
            since = self._caught_up_at.setdefault(container, now)
            gauge("pgcontroller_tier_lag_seconds").labels(label).set(now - since)
        self._containers_seen |= in_pg.keys()
        if now - self._tiered_counted_at >= TIERED_BYTES_EVERY_S:
            self._tiered_counted_at = now
            tiered: dict[int, int] = {}
            for name, size in await self._tiering.tiered_bytes():
                if self.owns(name):
                    container = self._container_of(name)
                    tiered[container] = tiered.get(container, 0) + size
            for container in tiered.keys() | self._containers_seen:
                gauge("pgcontroller_tier_tiered_bytes").labels(str(container)).set(tiered.get(container, 0))
            self._containers_seen |= tiered.keys()
            gauge("pgcontroller_tier_garbage_objects").set(await self._tiering.garbage_count())
