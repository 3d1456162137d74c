"""A watermark pass that appends each watermark to its stream's `_MARK` segment (over TCP to the
embedded segment store, a conditional append each), against the same pass keeping rows only.

    .venv/bin/python bench/mark_segments.py [--streams 1000] [--passes 3]

Streams are created as a client creates them (segments and the `_MARK` stream with its segment);
each has two writer marks, advanced before every pass (outside the timed pass). Both kinds of
pass run in this process on one event loop and one pool, over the same streams.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.cluster import BucketService, Fence
from app.domain.records import ScalingPolicy, StreamConfig
from app.segmentstore.client.marks import WireMarkStream
from app.services.watermarks import RoundSummary, WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import Services, running_controller
from bench._common import throwaway_database
from bench.watermarks import BUCKETS, SCOPE, advance_marks
from workers.watermarking import WatermarkWorker


async def create_streams(services: Services, count: int, concurrency: int = 16) -> None:
    names = iter(range(count))
    config = StreamConfig(ScalingPolicy.fixed(2))

    async def worker() -> None:
        for i in names:
            await services.streams.create_stream(SCOPE, f"s{i}", config)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def seed_marks(services: Services) -> None:
    await services.pool.execute(
        """
        INSERT INTO writer_marks (stream_id, writer, mark_time, position)
        SELECT s.id, 'w' || k, 1000 + k, jsonb_build_object('0', 100 * k, '1', 50 * k)
        FROM streams s, generate_series(1, 2) AS k
        WHERE s.scope = $1 AND s.name NOT LIKE '\\_%'
        """,
        SCOPE,
    )
    await services.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) "
        "SELECT 'watermarks', b, 'bench', 1 FROM generate_series(0, $1 - 1) AS b "
        "ON CONFLICT (service, bucket) DO UPDATE SET owner = 'bench', generation = 1",
        BUCKETS,
    )


async def timed(services: Services, worker: WatermarkWorker) -> tuple[float, RoundSummary]:
    await advance_marks(services)
    began = time.perf_counter()
    summary = await worker.run_once()
    return time.perf_counter() - began, summary


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()

    async with throwaway_database() as url, running_controller(url, workers=False) as services:
        began = time.perf_counter()
        await services.scopes.create_scope(SCOPE)
        await create_streams(services, args.streams)
        await seed_marks(services)
        print(
            f"set-up: {args.streams} streams with their _MARK streams in {time.perf_counter() - began:.1f}s"
        )

        store = PgWatermarkStore(services.pool)
        fences = {b: Fence(BucketService.WATERMARKS, b, 1) for b in range(BUCKETS)}

        def worker(service: WatermarkService) -> WatermarkWorker:
            return WatermarkWorker(
                service, lambda: frozenset(fences), BUCKETS, fences.get, services.clock, period_ms=10_000
            )

        kinds = {
            "rows only": worker(WatermarkService(store, services.clock)),
            "_MARK + rows": worker(
                WatermarkService(store, services.clock, WireMarkStream(services.storage.client))
            ),
        }
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        # Rows-only passes first: their rows name no offset, and the first pass with `_MARK` then
        # finds the segments empty, as after an upgrade (alternating would time the catch-up path).
        for kind, w in kinds.items():
            for _ in range(args.passes):
                seconds, summary = await timed(services, w)
                assert summary.emitted == args.streams and summary.adopted == 0, summary
                times[kind].append(seconds)
                print(f"{kind:>13}: {seconds * 1000:8.1f} ms  ({args.streams / seconds:,.0f} watermarks/s)")
        for kind, values in times.items():
            median = statistics.median(values)
            print(f"median {kind:>13}: {median * 1000:8.1f} ms per pass of {args.streams} streams")


if __name__ == "__main__":
    asyncio.run(main())
