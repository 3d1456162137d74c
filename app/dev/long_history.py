"""One stream with a very long history (`pgcontroller dev seed --one-stream-epochs N`), grown
inside PostgreSQL (generate_series, sql/queries/seed.sql `long_*`) in chunks of whole epochs.

Each chunk commits with the stream's current-epoch pointer moved to its last epoch, so after any
commit the stream is one a controller could have left behind, and a run interrupted at any point
resumes from the last committed epoch. Constraints, indexes and triggers all stay on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.dev.history_gen import SeedSpec, stream_slots
from app.dev.seed import SeedProgress, SeedSummary, seed_history
from app.domain.errors import AlreadyExists, IllegalState, InvalidInput
from app.domain.ids import qualified_segment_name
from app.domain.records import SEALED_SIZE_SHARD_EPOCHS
from app.store import queries
from app.store.db import PgSession, connect
from app.store.errors import translated
from app.store.migrate import ensure_schema
from app.store.pool import asyncpg_dsn

_SQL = queries.load("seed")
DEFAULT_CHUNK_EPOCHS = 1_000_000
_LOW_32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class ReplacementHistory:
    """The pattern a long stream follows from its two epoch-0 segments: epoch e >= 1 seals one
    segment and creates one with the same key range, alternating low and high, at t0 + e * step.
    `segment(e)` is the one epoch e created; ids are what a real one-for-one scale gives."""

    stream_id: int
    low: int  # epoch-0 segment ids, low range then high
    high: int
    low_time: int  # their creation times
    high_time: int
    t0: int  # epoch 0's creation time
    step: int  # ms between epochs
    bounds: tuple[float, float, float]  # low start, middle, high end

    @property
    def first_number(self) -> int:
        return max(self.low & _LOW_32, self.high & _LOW_32) + 1

    def segment(self, epoch: int) -> int:
        if epoch <= 0:
            raise ValueError("epoch 0 created two segments: `low` and `high`")
        return (epoch << 32) | (self.first_number + epoch - 1)

    def active(self, epoch: int) -> tuple[int, int]:
        """The segment ids of `epoch` in key order, as the epoch row holds them."""
        if epoch == 0:
            return self.low, self.high
        kept = self.high if epoch == 1 else self.segment(epoch - 1)
        created = self.segment(epoch)
        return (created, kept) if (epoch - 1) % 2 == 0 else (kept, created)

    def sealed_by(self, epoch: int) -> int:
        """The segment epoch `epoch` (>= 1) sealed."""
        if epoch == 1:
            return self.low
        if epoch == 2:
            return self.high
        return self.segment(epoch - 2)

    def time_of(self, epoch: int) -> int:
        return self.t0 + epoch * self.step

    def creation_time(self, segment: int) -> int:
        if segment == self.low:
            return self.low_time
        if segment == self.high:
            return self.high_time
        return self.time_of(segment >> 32)


class LongStreamGrower:
    """Grows a stream that follows ReplacementHistory, chunk by chunk, on one connection."""

    def __init__(self, conn: PgSession) -> None:
        self._conn = conn

    async def load(
        self, scope: str, name: str, step_for: Callable[[int], int]
    ) -> tuple[ReplacementHistory, int, bool]:
        """The stream's pattern, its current epoch and whether it has segment-store rows.
        `step_for(t0)` gives the time between epochs while the stream is at epoch 0; afterwards
        epoch 1's time fixes it (so a resumed run keeps the spacing it began with)."""
        row = await self._conn.fetchrow(_SQL["long_stream_state"], scope, name)
        if row is None:
            raise IllegalState(f"stream {scope}/{name} does not exist")
        ids, starts, ends, times = (
            row["segment_ids"],
            row["key_starts"],
            row["key_ends"],
            row["segment_creation_times"],
        )
        if len(ids) != 2:
            raise IllegalState(f"stream {scope}/{name} must have had two segments in epoch 0")
        (s0, m0, low, low_time), (m1, s1, high, high_time) = sorted(
            zip(starts, ends, ids, times, strict=True)
        )
        if m0 != m1:
            raise IllegalState(f"the epoch-0 segments of {scope}/{name} must be adjacent")
        current, t0 = int(row["current"]), int(row["t0"])
        step = step_for(t0) if row["t1"] is None else int(row["t1"]) - t0
        if step <= 0:
            raise InvalidInput("the time between epochs must be positive")
        history = ReplacementHistory(row["id"], low, high, low_time, high_time, t0, step, (s0, m0, s1))
        if tuple(row["current_ids"]) != history.active(current):
            raise IllegalState(
                f"stream {scope}/{name} was scaled otherwise than this seeder grows streams; "
                "only a stream it grew (or one at epoch 0 with two segments) can be grown"
            )
        names = [qualified_segment_name(scope, name, s) for s in history.active(current)]
        store_rows = bool(await self._conn.fetchval(_SQL["store_rows_exist"], names))
        return history, current, store_rows

    async def grow_chunk(
        self, scope: str, name: str, history: ReplacementHistory, first: int, last: int, store_rows: bool
    ) -> None:
        """Epochs first..last (first = current epoch + 1), in the caller's transaction."""
        if not 1 <= first <= last:
            raise InvalidInput(f"bad epoch range {first}..{last}")
        h, conn = history, self._conn
        s0, mid, s1 = h.bounds
        await conn.execute(
            _SQL["long_epochs"],
            h.stream_id, first, last, h.t0, h.step, h.low, h.high, h.first_number, h.high_time, s0, mid, s1,
        )  # fmt: skip
        await conn.execute(
            _SQL["long_segments"], h.stream_id, first, last, h.first_number, h.t0, h.step, s0, mid, s1
        )
        # Segments created before the chunk and sealed in it: those of epochs first and first + 1.
        earlier = [(h.sealed_by(e), e) for e in range(first, min(first + 1, last) + 1)]
        await conn.execute(
            _SQL["long_seal_earlier"], h.stream_id, [s for s, _ in earlier], [e for _, e in earlier]
        )
        await conn.execute(
            _SQL["long_sealed_sizes"],
            h.stream_id, first, last, h.t0, h.step, h.low, h.high, h.first_number,
            h.low_time, h.high_time, h.low & _LOW_32, h.high & _LOW_32, SEALED_SIZE_SHARD_EPOCHS,
        )  # fmt: skip
        if store_rows:
            created = [s for s in h.active(last) if s >> 32 >= first]
            await conn.execute(
                _SQL["long_store_rows"],
                h.stream_id,
                [qualified_segment_name(scope, name, s) for s, _ in earlier],
                [qualified_segment_name(scope, name, s) for s in created],
                [h.creation_time(s) for s in created],
                [(h.time_of(last) - h.creation_time(s)) * (1 + (s & _LOW_32) % 8) for s in created],
            )
        moved = await conn.fetchval(_SQL["long_move_pointer"], h.stream_id, first - 1, last)
        if moved != 1:
            raise IllegalState(f"the current epoch of {scope}/{name} moved while it was being grown")


def long_stream_spec(spec: SeedSpec) -> SeedSpec:
    """The base the long stream starts from: one stream, epoch 0 only, two segments, and none of
    the transactions or retention a spread-out history has (those follow the epochs the Python
    generator makes, not the ones grown here)."""
    return dataclasses.replace(
        spec,
        streams=1,
        epochs_per_stream=1,
        total_epochs=None,
        txns_per_stream=0,
        retention_fraction=0.0,
        min_segments=2,
        max_segments=max(spec.max_segments, 3),
    )


async def seed_long_stream(
    url: str,
    spec: SeedSpec,
    epochs: int,
    *,
    resume: bool = False,
    chunk_epochs: int = DEFAULT_CHUNK_EPOCHS,
    analyze: bool = True,
    progress: Callable[[SeedProgress], None] | None = None,
) -> SeedSummary:
    """Seeds one stream (`spec`'s first slot) with `epochs` epoch records, epoch 0 included,
    spread evenly from its creation to the end of the span. Raises AlreadyExists when the stream
    exists, unless `resume`, which grows it on from its current epoch."""
    if epochs <= 0:
        raise InvalidInput("the long stream needs at least one epoch (epoch 0 counts)")
    if chunk_epochs <= 0:
        raise InvalidInput("the chunk size must be positive")
    base = long_stream_spec(spec)
    base.validate()
    # Streams appear during the span's first tenth: the other nine tenths hold the epochs.
    if epochs - 1 > base.span_ms * 9 // 10:
        raise InvalidInput(
            f"{epochs:,} epochs at least one ms apart do not fit in the span; give a longer one"
        )
    slot = next(stream_slots(base))
    with translated():  # migrations run on their own connections, outside the wrapper
        await ensure_schema(url)
    began = time.perf_counter()  # the rate is the seeding's own, migrations aside
    base_summary = await seed_history(url, base, resume=True, analyze=False)
    if base_summary.skipped and not resume:
        raise AlreadyExists(
            f"stream {slot.scope}/{slot.name} exists already; choose other prefixes or another database "
            "(resume grows it on)"
        )
    conn = await connect(asyncpg_dsn(url))
    try:
        grower = LongStreamGrower(conn)
        history, current, store_rows = await grower.load(
            slot.scope, slot.name, lambda t0: max(1, (base.end_ms - t0) // max(1, epochs - 1))
        )
        target = epochs - 1
        if current > target:
            raise IllegalState(
                f"stream {slot.scope}/{slot.name} is at epoch {current} already, past {target}"
            )
        written = base_summary.epochs
        done = current
        while done < target:
            last = min(done + chunk_epochs, target)
            async with conn.transaction():
                await grower.grow_chunk(slot.scope, slot.name, history, done + 1, last, store_rows)
            written += last - done
            done = last
            if progress is not None:
                progress(SeedProgress(int(done == target), 1, done + 1, epochs, time.perf_counter() - began))
        if analyze:
            await conn.execute(_SQL["analyze_tables"])
    finally:
        await conn.close()
    rows = dict(base_summary.rows)
    grown = written - base_summary.epochs
    rows["epochs"] = rows.get("epochs", 0) + grown
    rows["segments"] = rows.get("segments", 0) + grown
    return SeedSummary(
        streams=base_summary.streams,
        skipped=base_summary.skipped,
        epochs=written,
        rows=rows,
        seconds=time.perf_counter() - began,
    )
