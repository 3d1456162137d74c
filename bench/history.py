"""getSegmentsImmediatelyFollowing and isStreamCutValid latency on a 10-epoch and a
1,000,000-epoch stream, closed loop with 1 and 8 calls in flight.

    .venv/bin/python bench/history.py [--epochs 1000000] [--seconds 3] [--in-flight 1,8]

Both streams are created through gRPC (2 segments), then their history is written straight
into the tables (app.testing.history_seed.seed_replacement_history: each epoch replaces one segment
with one of the same range). The controller runs as a real `pgcontroller serve` subprocess
on a throwaway embedded PostgreSQL.

Each query runs twice: "fixed" asks about one segment / one cut again and again (after the
first call its immutable epoch records come from the process cache), "spread" picks a random
one in a window of --window epochs (wider than the cache's 100,000 epochs on the long stream,
so most calls read PostgreSQL). A cached getCurrentSegments under the same load is the floor
of what this client and server pair can answer, database aside.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.history_seed import SeededHistory, seed_replacement_history
from bench._common import LoadResult, closed_loop, create_fixed_stream, served_controller

SCOPE = "bench"
TARGET_P99_MS = 5.0


async def seed(url: str, name: str, epochs: int) -> tuple[SeededHistory, float]:
    began = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        history = await seed_replacement_history(conn, SCOPE, name, epochs)
        # A long-lived history would have been vacuumed and analysed by now.
        await conn.execute("VACUUM ANALYZE epochs")
        await conn.execute("VACUUM ANALYZE segments")
    finally:
        await conn.close()
    return history, time.perf_counter() - began


def pick(rng: random.Random, low: int, high: int, spread: bool) -> int:
    """`low` itself for a fixed query, else uniform in [low, high]."""
    return rng.randint(low, high) if spread else low


def queries(
    stub: ControllerServiceStub, name: str, history: SeededHistory, window: int, rng: random.Random
) -> list[tuple[str, Callable[[], Awaitable[object]], Callable[[object], bool]]]:
    """(label, call, check of one answer) for each query shape."""
    n = history.epochs
    info = pb.StreamInfo(scope=SCOPE, stream=name)
    w = min(window, n - 3)
    result: list[tuple[str, Callable[[], Awaitable[object]], Callable[[object], bool]]] = []

    def successor_is_single(reply: object) -> bool:
        assert isinstance(reply, pb.SuccessorResponse)
        return len(reply.segments) == 1

    def valid(reply: object) -> bool:
        assert isinstance(reply, pb.StreamCutValidityResponse)
        return reply.response

    for spread in (False, True):
        mode = "spread" if spread else "fixed"
        # Segments created in epochs 1..n-2 are sealed (in epoch e + 2).
        deep = (1, w)
        recent = (n - 2 - w + 1, n - 2) if spread else (n - 2, n - 2)
        for where, (low, high) in (("deep", deep), ("recent", recent)):

            def follow(low: int = low, high: int = high, spread: bool = spread) -> Awaitable[object]:
                segment = history.segment(pick(rng, low, high, spread))
                return stub.getSegmentsImmediatelyFollowing(pb.SegmentId(streamInfo=info, segmentId=segment))

            result.append((f"{name} successors {where} {mode}", follow, successor_is_single))
        # A cut is the active set of one epoch: near the head of the history (oldest) or the tail.
        head = (2, 2 + w - 1)
        tail = (n - w + 1, n) if spread else (n, n)
        for where, (low, high) in (("head", head), ("tail", tail)):

            def cut(low: int = low, high: int = high, spread: bool = spread) -> Awaitable[object]:
                epoch = pick(rng, low, high, spread)
                return stub.isStreamCutValid(
                    pb.StreamCut(streamInfo=info, cut=dict.fromkeys(history.active(epoch), 0))
                )

            result.append((f"{name} isStreamCutValid {where} {mode}", cut, valid))
    return result


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1_000_000, help="epochs of the long stream")
    parser.add_argument("--short-epochs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument(
        "--in-flight", default="1,8", help="comma-separated; 1 shows service time without queueing"
    )
    parser.add_argument("--window", type=int, default=200_000, help="epochs a spread query picks from")
    args = parser.parse_args()
    rng = random.Random(7)
    in_flights = [int(v) for v in args.in_flight.split(",")]

    results: list[LoadResult] = []
    seeded: list[tuple[str, int, float]] = []
    async with served_controller(SCOPE) as (url, stub):
        streams: list[tuple[str, SeededHistory]] = []
        for name, epochs in (("short", args.short_epochs), ("long", args.epochs)):
            await create_fixed_stream(stub, pb.StreamInfo(scope=SCOPE, stream=name), 2)
            history, seconds = await seed(url, name, epochs)
            seeded.append((name, epochs, seconds))
            streams.append((name, history))
        for name, history in streams:
            current = await stub.getCurrentSegments(pb.StreamInfo(scope=SCOPE, stream=name))
            ids = sorted(r.segmentId.segmentId for r in current.segmentRanges)
            assert ids == sorted(history.active(history.epochs)), (name, ids)
            for label, call, check in queries(stub, name, history, args.window, rng):
                for _ in range(20):
                    assert check(await call()), label
                for in_flight in in_flights:
                    loaded = await closed_loop(
                        f"{label} x{in_flight}", call, in_flight, args.seconds, args.warmup
                    )
                    results.append(loaded)
        # The floor: a cached read with no database work, under the same load.
        info = pb.StreamInfo(scope=SCOPE, stream="long")
        for in_flight in in_flights:
            floor = await closed_loop(
                f"reference getCurrentSegments x{in_flight}",
                lambda: stub.getCurrentSegments(info),
                in_flight,
                args.seconds,
                args.warmup,
            )
            results.append(floor)

    for name, epochs, seconds in seeded:
        print(f"seeded {name}: {epochs:,} epochs in {seconds:.1f} s (with VACUUM ANALYZE)")
    print(
        f"in flight (xN): {args.in_flight}, measured seconds per run: {args.seconds}, "
        f"spread window: {args.window:,} epochs"
    )
    for result in results:
        verdict = "ok" if result.percentile(0.99) < TARGET_P99_MS else f"MISSES p99 < {TARGET_P99_MS:g} ms"
        print(f"{result.line()}  {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
