"""Append throughput of PgSegmentStorage (app/store/segment_data.py) next to its floor: a bare
INSERT of the same bytes in the same shape (one segment_chunks row per call, one statement, the
same pool; the bytes packed as the store packs them, app/store/chunk_packing.py, and the packing
timed with the INSERT), in one script on one throwaway PostgreSQL.

    .venv/bin/python bench/segment_append.py [--calls 200] [--events 500] [--event-bytes 1024]

Each call appends `events` events of `event-bytes` as one block (what one AppendBlockEnd
carries). Reported: calls/s and MB/s (10^6 bytes) for one writer, and for four writers at once
(each on its own segment, then all four on one segment). Then the container-map fence
(app/store/append_fence.py) beside no fence, and the fence with serve's wait for a connection
(app/store/patient_db.py): 64 writers of 1 KiB blocks at once, so group commits carry many
statements; rounds alternate, the best of each reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.ports import HostAddress
from app.segmentstore.storage import AppendRequest
from app.store.append_fence import AppendFence
from app.store.chunk_packing import pack
from app.store.db import Database
from app.store.patient_db import PatientDatabase
from app.store.pool import create_pool
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock
from bench._common import throwaway_database


async def timed(label: str, calls: int, size: int, run: Callable[[], Awaitable[None]]) -> None:
    start = time.perf_counter()
    await run()
    elapsed = time.perf_counter() - start
    print(f"{label:<46} {calls / elapsed:8.1f} calls/s {calls * size / elapsed / 1e6:8.1f} MB/s")


async def bench(db: Database, calls: int, block: bytes) -> None:
    storage = PgSegmentStorage(db, ManualClock())
    size = len(block)
    for name in ("bare", "one", "w0", "w1", "w2", "w3", "shared", "bare0", "bare1", "bare2", "bare3"):
        await storage.create_segment(f"b/s/{name}", "stream", 0, 0, 0)

    async def bare(name: str) -> None:
        for i in range(calls):
            stored, lz4_length = pack(block)
            await db.execute(
                "INSERT INTO segment_chunks (segment, start_offset, data, lz4_length)"
                " VALUES ($1, $2, $3, $4)",
                f"b/s/{name}",
                i * size,
                stored,
                lz4_length,
            )

    async def appends(name: str, writer: int) -> None:
        for n in range(1, calls + 1):
            await storage.append(AppendRequest(f"b/s/{name}", writer, block, n, 500))

    # Warm-up (connections, caches, the relations' first extensions), not reported.
    await storage.create_segment("b/s/warm", "stream", 0, 0, 0)
    for n in range(1, 21):
        await storage.append(AppendRequest("b/s/warm", 9, block, n, 500))
    await timed("bare INSERT, one writer", calls, size, lambda: bare("bare"))
    await timed("PgSegmentStorage.append, one writer", calls, size, lambda: appends("one", 1))

    async def bare4() -> None:
        await asyncio.gather(*(bare(f"bare{i}") for i in range(4)))

    async def four() -> None:
        await asyncio.gather(*(appends(f"w{i}", i + 1) for i in range(4)))

    async def shared() -> None:
        await asyncio.gather(*(appends("shared", i + 1) for i in range(4)))

    await timed("bare INSERT, four writers (total)", 4 * calls, size, bare4)
    await timed("append, four writers, four segments (total)", 4 * calls, size, four)
    await timed("append, four writers, one segment (total)", 4 * calls, size, shared)
    state = await storage.segment_state("b/s/shared")
    assert state.length == 4 * calls * size, state


FENCE_WRITERS = 64
FENCE_ROUNDS = 3
CONTAINERS = 4


async def fence_beside_none(db: Database, calls: int) -> None:
    me = HostAddress("127.0.0.1", 1)
    await db.execute(
        "INSERT INTO container_map (container, host, port) SELECT c, $1, $2 FROM generate_series(0, $3 - 1) c"
        " ON CONFLICT (container) DO UPDATE SET host = $1, port = $2",
        me.host,
        me.port,
        CONTAINERS,
    )
    block = os.urandom(1024)
    kinds = {
        "unfenced": PgSegmentStorage(db, ManualClock()),
        "fenced": PgSegmentStorage(db, ManualClock(), fence=AppendFence(CONTAINERS, me)),
        # What serve runs: the fence, and the wait for a connection (app/store/patient_db.py).
        "fenced, patient": PgSegmentStorage(
            PatientDatabase(db, 3.0), ManualClock(), fence=AppendFence(CONTAINERS, me)
        ),
    }
    best = dict.fromkeys(kinds, 0.0)
    for round_ in range(FENCE_ROUNDS):
        for kind, storage in kinds.items() if round_ % 2 == 0 else reversed(kinds.items()):
            names = [f"f/{kind.replace(', ', '-')}{round_}/{w}" for w in range(FENCE_WRITERS)]
            for name in names:
                await storage.create_segment(name, "stream", 0, 0, 0)

            async def writer(name: str, store: PgSegmentStorage = storage) -> None:
                for n in range(1, calls + 1):
                    await store.append(AppendRequest(name, 1, block, n, 1))

            start = time.perf_counter()
            await asyncio.gather(*(writer(name) for name in names))
            best[kind] = max(best[kind], FENCE_WRITERS * calls / (time.perf_counter() - start))
    for kind, rate in best.items():
        print(f"{'append, 64 writers of 1 KiB, ' + kind:<46} {rate:8.1f} calls/s (best of {FENCE_ROUNDS})")
    print(f"fenced / unfenced: {best['fenced'] / best['unfenced']:.2f}")
    print(f"fenced, patient / fenced: {best['fenced, patient'] / best['fenced']:.2f}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--event-bytes", type=int, default=1024)
    args = parser.parse_args()
    block = os.urandom(args.events * args.event_bytes)
    print(f"block: {args.events} x {args.event_bytes} B = {len(block)} B, {args.calls} calls per writer")
    async with throwaway_database() as url:
        db = await create_pool(url, min_size=4, max_size=8)
        try:
            await bench(db, args.calls, block)
            await fence_beside_none(db, args.calls)
        finally:
            await db.close()


if __name__ == "__main__":
    asyncio.run(main())
