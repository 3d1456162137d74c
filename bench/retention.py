"""Retention passes over many streams, against a throwaway embedded PostgreSQL.

    .venv/bin/python bench/retention.py [--streams 10000] [--segments 2] [--buckets 1]
        [--concurrency 16] [--pool 20]

Setup (not timed): --streams streams with a TIME policy (min = one period) and --segments
segments each, bulk-inserted by SQL together with their embedded segments (100 bytes each)
and the retention bucket claims. The RetentionWorker then runs passes on a fake clock:

first sight    every stream is new to the worker: nothing is due (one statement).
records        one period later every stream is due: tail cut from the segment store, size
               from the epoch-0 head, one record each; nothing old enough to truncate.
truncations    the segments grow, one period (+1 ms) later every stream is due again: a new
               record, a truncation started at the first record (request posted, truncation
               record written) and the first record purged.
nothing due    right after: nothing is due.

Target (from the issue): a pass over 10,000 streams in at most 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.clock import SystemClock
from app.domain.cluster import BucketService, Fence
from app.domain.scaling import initial_segments
from app.services.retention import RetentionService
from app.store.pool import create_pool
from app.store.retention import PgRetentionStore
from app.store.streams import PgStreamStore
from app.testing.clock import ManualClock
from app.testing.segment_store import embedded_segment_store
from bench._common import throwaway_database
from workers.retention import RetentionPass, RetentionWorker

SCOPE = "bench"
PERIOD_MS = 30 * 60 * 1000
TIME = 1

_STREAMS = """
WITH s AS (
    INSERT INTO streams (scope, name, creation_time)
    SELECT $1, 'r' || i, $2 FROM generate_series(1, $3::int) AS i
    RETURNING id
), cfg AS (
    INSERT INTO stream_configs (stream_id, scale_type, target_rate, scale_factor, min_num_segments,
        retention_type, retention_param, retention_max)
    SELECT id, 0, 0, 0, $4, $5, $6, 9223372036854775807 FROM s
), st AS (
    INSERT INTO stream_states (stream_id, state) SELECT id, 'ACTIVE' FROM s
), ce AS (
    INSERT INTO stream_current_epochs (stream_id, epoch) SELECT id, 0 FROM s
), tr AS (
    INSERT INTO stream_truncations (stream_id) SELECT id FROM s
), etr AS (
    INSERT INTO stream_epoch_transitions (stream_id) SELECT id FROM s
), ep AS (
    INSERT INTO epochs (stream_id, epoch, reference_epoch, creation_time, segment_ids, key_starts,
        key_ends, segment_creation_times, created_segments)
    SELECT id, 0, 0, $2, $7, $8, $9, $10, $7 FROM s
)
INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, key_start, key_end)
SELECT s.id, u.sid, u.sid::int, 0, $2, u.ks, u.ke
FROM s, unnest($7::bigint[], $8::float8[], $9::float8[]) AS u(sid, ks, ke)
"""

_SEGMENTS = """
INSERT INTO embedded_segments (name, kind, length, created_at)
SELECT $1 || '/r' || i || '/' || n || '.#epoch.0', 'stream', 100, $2
FROM generate_series(1, $3::int) AS i, generate_series(0, $4::int - 1) AS n
"""

_CLAIMS = """
INSERT INTO bucket_owners (service, bucket, owner, generation)
SELECT 'retention', b, 'bench', 1 FROM generate_series(0, $1::int - 1) AS b
ON CONFLICT (service, bucket) DO UPDATE SET owner = 'bench', generation = 1
"""


async def setup(pool: object, streams: int, segments: int, now: int) -> None:
    epoch_zero = initial_segments(segments, 0, now)
    ids = [s.id for s in epoch_zero]
    async with pool.acquire() as conn:  # type: ignore[attr-defined]
        await conn.execute("INSERT INTO scopes (name, created_at) VALUES ($1, $2)", SCOPE, now)
        await conn.execute(
            _STREAMS,
            SCOPE,
            now,
            streams,
            segments,
            TIME,
            PERIOD_MS,
            ids,
            [s.key_start for s in epoch_zero],
            [s.key_end for s in epoch_zero],
            [s.creation_time for s in epoch_zero],
        )
        await conn.execute(_SEGMENTS, SCOPE, now, streams, segments)
        await conn.execute("ANALYZE")


async def timed(name: str, worker: RetentionWorker) -> tuple[float, RetentionPass]:
    began = time.perf_counter()
    done = await worker.run_once()
    seconds = time.perf_counter() - began
    per_stream = seconds / done.due * 1000 if done.due else 0.0
    print(
        f"{name:<14} {seconds:8.2f} s  members {done.members:>6}  due {done.due:>6}  "
        f"recorded {done.recorded:>6}  truncations {done.truncations:>6}  purged {done.purged:>6}  "
        f"failed {done.failed}  fenced {done.fenced}  ({per_stream:.2f} ms per due stream)"
    )
    return seconds, done


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--buckets", type=int, default=1, help="retention buckets, all owned here")
    parser.add_argument("--concurrency", type=int, default=16, help="cycles in flight")
    parser.add_argument("--pool", type=int, default=20, help="connection pool size (serve's default)")
    args = parser.parse_args()

    async with throwaway_database() as url:
        pool = await create_pool(url, max_size=args.pool)
        try:
            clock = ManualClock(SystemClock().now_ms())
            began = time.perf_counter()
            await setup(pool, args.streams, args.segments, clock.now)
            await pool.execute(_CLAIMS, args.buckets)
            print(
                f"setup: {args.streams} streams x {args.segments} segments, "
                f"{args.buckets} bucket(s) in {time.perf_counter() - began:.1f} s"
            )
            async with embedded_segment_store(pool) as segment_store:
                streams = PgStreamStore(pool)
                store = PgRetentionStore(pool)
                service = RetentionService(streams, store, segment_store, clock, frequency_ms=PERIOD_MS)
                buckets = frozenset(range(args.buckets))
                worker = RetentionWorker(
                    store,
                    service,
                    clock,
                    owned=lambda: buckets,
                    bucket_count=args.buckets,
                    fence_for=lambda b: Fence(BucketService.RETENTION, b, 1),
                    frequency_ms=PERIOD_MS,
                    concurrency=args.concurrency,
                )

                await timed("first sight", worker)
                clock.now += PERIOD_MS
                heavy = [await timed("records", worker)]
                await pool.execute("UPDATE embedded_segments SET length = length + 100")
                clock.now += PERIOD_MS + 1
                heavy.append(await timed("truncations", worker))
                await timed("nothing due", worker)

            requests = await pool.fetchval("SELECT count(*) FROM requests WHERE kind = 'truncate_stream'")
            rows = await pool.fetchval("SELECT count(*) FROM retention_set")
            print(f"truncate requests posted: {requests}; retention-set rows left: {rows}")
            worst = max(seconds for seconds, _ in heavy)
            verdict = "meets" if worst <= 60 else "MISSES"
            print(f"slowest pass with every stream due: {worst:.1f} s ({verdict} the 60 s target)")
        finally:
            await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
