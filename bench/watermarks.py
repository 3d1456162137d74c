"""One watermark pass over 5,000 streams (2-3 writer marks each), and metadata-read latency
(getCurrentSegments' service call) alone and while the worker runs a pass every period.

    .venv/bin/python bench/watermarks.py [--streams 5000] [--seconds 30] [--in-flight 8]

Everything runs in this process on one event loop and one pool, as in `pgcontroller serve`:
the reads compete with the pass for the loop and the pool, which is what the target is about
(5,000 streams per 10 s per process while reads stay at p99 < 10 ms). Streams and marks are
set up in bulk; before each pass every writer's mark advances (one UPDATE, outside the
timed pass), standing in for the writers' noteTimestamp traffic, which is not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.cluster import BucketService, Fence
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.watermarks import RoundSummary, WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import Services, running_controller
from bench._common import LoadResult, closed_loop, percentile, throwaway_database
from workers.watermarking import WatermarkWorker

SCOPE = "bench"
BUCKETS = 100


async def create_streams(services: Services, count: int, concurrency: int = 16) -> None:
    """Metadata only (no segment-store calls, no mark streams): what a pass and a read touch."""
    names = iter(range(count))
    config = StreamConfig(ScalingPolicy.fixed(3))

    async def worker() -> None:
        for i in names:
            created = await services.stream_store.create_stream_metadata(SCOPE, f"s{i}", config, 1)
            state = await services.stream_store.get_state(SCOPE, f"s{i}")
            if created.created:
                await services.stream_store.activate_created_stream(
                    SCOPE, f"s{i}", state.version, index_tags=False
                )

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def seed_marks(services: Services) -> int:
    """Writers w1..w2 (odd stream ids: w1..w3), each on two of the stream's three segments."""
    await services.pool.execute(
        """
        INSERT INTO writer_marks (stream_id, writer, mark_time, position)
        SELECT s.id, 'w' || k, 1000 + k,
               jsonb_build_object(((k - 1) % 3)::text, 100 * k, (k % 3)::text, 50 * k)
        FROM streams s, generate_series(1, 3) AS k
        WHERE s.scope = $1 AND (k < 3 OR s.id % 2 = 1)
        """,
        SCOPE,
    )
    await services.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) "
        "SELECT 'watermarks', b, 'bench', 1 FROM generate_series(0, $1 - 1) AS b "
        "ON CONFLICT (service, bucket) DO UPDATE SET owner = 'bench', generation = 1",
        BUCKETS,
    )
    return int(await services.pool.fetchval("SELECT count(*) FROM writer_marks"))


async def advance_marks(services: Services) -> None:
    await services.pool.execute(
        "UPDATE writer_marks SET mark_time = mark_time + 1000, "
        "position = (SELECT jsonb_object_agg(key, value::bigint + 10) FROM jsonb_each_text(position)), "
        "version = version + 1"
    )


async def timed_pass(services: Services, worker: WatermarkWorker) -> tuple[float, RoundSummary]:
    await advance_marks(services)
    began = time.perf_counter()
    summary = await worker.run_once()
    return time.perf_counter() - began, summary


async def reads(
    services: Services, names: list[str], seconds: float, in_flight: int, label: str
) -> tuple[LoadResult, list[tuple[float, float]]]:
    """A closed loop of current_segments on random streams; also each call's (start, end) in
    loop time, to tell the calls that overlapped a pass from the others."""
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    spans: list[tuple[float, float]] = []

    async def call() -> object:
        began = loop.time()
        result = await services.segments.current_segments(SCOPE, rng.choice(names))
        spans.append((began, loop.time()))
        return result

    result = await closed_loop(label, call, in_flight, seconds)
    # closed_loop drops the warm-up calls; keep the same last len(latencies) spans.
    return result, spans[len(spans) - len(result.latencies_ms) :]


def _gc_timer(pauses: list[float]) -> Callable[[str, dict[str, int]], None]:
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((time.perf_counter() - started[0]) * 1000)

    return callback


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--period-ms", type=int, default=10_000)
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() after set-up, as a long-running server would after start-up: a pass then "
        "no longer triggers full collections over the set-up's objects",
    )
    args = parser.parse_args()

    async with throwaway_database() as url, running_controller(url, workers=False) as services:
        began = time.perf_counter()
        await services.scopes.create_scope(SCOPE)
        await create_streams(services, args.streams)
        marks = await seed_marks(services)
        print(f"set-up: {args.streams} streams, {marks} writer marks in {time.perf_counter() - began:.1f}s")

        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        pauses: list[float] = []
        gc.callbacks.append(_gc_timer(pauses))

        service = WatermarkService(PgWatermarkStore(services.pool), services.clock)
        fences = {b: Fence(BucketService.WATERMARKS, b, 1) for b in range(BUCKETS)}
        worker = WatermarkWorker(
            service, lambda: frozenset(fences), BUCKETS, fences.get, services.clock, period_ms=args.period_ms
        )
        names = [f"s{i}" for i in range(args.streams)]

        passes: list[tuple[float, RoundSummary]] = []
        for _ in range(3):
            passes.append(await timed_pass(services, worker))
        for seconds, summary in passes:
            print(
                f"one pass: {seconds * 1000:8.1f} ms  streams {summary.streams}  emitted {summary.emitted}  "
                f"({summary.streams / seconds:,.0f} streams/s)"
            )

        alone, _spans = await reads(services, names, args.seconds, args.in_flight, "reads alone")

        windows: list[tuple[float, float]] = []
        during_passes: list[tuple[float, RoundSummary]] = []

        async def periodic() -> None:
            loop = asyncio.get_running_loop()
            while True:
                started = loop.time()
                await advance_marks(services)
                began = loop.time()
                summary = await worker.run_once()
                ended = loop.time()
                windows.append((began, ended))
                during_passes.append((ended - began, summary))
                await asyncio.sleep(max(0.0, started + args.period_ms / 1000 - loop.time()))

        ticker = asyncio.create_task(periodic())
        try:
            loaded, spans = await reads(
                services, names, args.seconds, args.in_flight, "reads with a pass per period"
            )
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)

    print(
        f"in flight: {args.in_flight}, measured seconds per run: {args.seconds}, period {args.period_ms} ms"
    )
    for seconds, summary in during_passes:
        print(
            f"pass under load: {seconds * 1000:8.1f} ms  streams {summary.streams}  emitted {summary.emitted}"
        )
    print(alone.line())
    print(loaded.line())
    print(
        f"ratio p99 with passes / alone: {loaded.percentile(0.99) / alone.percentile(0.99):5.2f}   "
        f"throughput: {loaded.throughput / alone.throughput:6.1%}"
    )
    pass_ms = max(seconds for seconds, _ in passes) * 1000
    print(f"slowest quiet pass {pass_ms:.0f} ms = {pass_ms / args.period_ms:.1%} of the period")
    print(
        f"full (generation 2) collections: {len(pauses)}, longest {max(pauses, default=0.0):.1f} ms"
        + ("" if args.gc_freeze else " (try --gc-freeze)")
    )
    overlapping = [
        (end - start) * 1000
        for start, end in spans
        if any(start < w_end and end > w_start for w_start, w_end in windows)
    ]
    if overlapping:
        print(
            f"reads overlapping a pass: n={len(overlapping)}  p50 {percentile(overlapping, 0.5):.2f} ms  "
            f"p99 {percentile(overlapping, 0.99):.2f} ms  max {max(overlapping):.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
