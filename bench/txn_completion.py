"""What keeping completed-transaction details costs the commit path: the statement that
completes a commit batch (sql/queries/txns.sql complete_commit_batch), timed on a throwaway
embedded PostgreSQL in three variants on identical batches, interleaved round by round:

  bare      the statement without its `kept` step (no details written): the baseline
  details   the statement as the controller runs it (details written by the statement)
  trigger   bare, plus migration 0011's statement trigger that wrote them before 0012

    .venv/bin/python bench/txn_completion.py [--rounds 30] [--batch 100]

Each round opens --batch transactions on one stream, moves them to COMMITTING through the
service (so each has its queued commit request, as in production), writes the batch record,
times only the completing statement, then deletes the batch's requests (the processor's
acknowledgement). Prints p50/p99 per variant and the ratio to bare.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.records import ScalingPolicy, StreamConfig
from app.store import queries
from app.testing.controller import Services, running_controller
from bench._common import throwaway_database

SCOPE, STREAM = "bench", "completion"
_COMPLETE = queries.load("txns")["complete_commit_batch"]
_KEPT_START = _COMPLETE.index("), kept AS (")
_KEPT_END = _COMPLETE.index("), state AS (")
BARE = _COMPLETE[:_KEPT_START] + _COMPLETE[_KEPT_END:]
_PREVIOUS = importlib.import_module("migrations.versions.0011_reporting")


async def one_batch(s: Services, size: int, sql: str) -> float:
    for _ in range(size):
        created = await s.transactions.create(SCOPE, STREAM, 20_000)
        await s.transactions.commit(SCOPE, STREAM, created.txn)
    store = s.txn_store
    batch = await store.next_commit_batch(SCOPE, STREAM, size)
    assert batch is not None and len(batch.txns) == size
    record = await store.get_committing(SCOPE, STREAM)
    version = await store.start_commit_batch(SCOPE, STREAM, batch, record.version)
    highs = [t.high for t in batch.txns]
    lows = [t.low for t in batch.txns]
    async with s.pool.acquire() as conn:
        began = time.perf_counter()
        done = await conn.fetchval(sql, SCOPE, STREAM, version, highs, lows, int(time.time() * 1000), None)
        elapsed = time.perf_counter() - began
    assert done is not None
    # The commit processor acknowledges the batch's requests once it is complete.
    await s.pool.execute("DELETE FROM requests WHERE scope = $1 AND stream = $2", SCOPE, STREAM)
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    timings: dict[str, list[float]] = {"bare": [], "details": [], "trigger": []}
    async with throwaway_database() as url, running_controller(url, workers=False) as s:
        await s.scopes.create_scope(SCOPE)
        await s.streams.create_stream(SCOPE, STREAM, StreamConfig(ScalingPolicy.fixed(1)))
        for _ in range(3):  # warm-up: plans cached, pages in memory
            await one_batch(s, args.batch, _COMPLETE)
        for _ in range(args.rounds):
            timings["bare"].append(await one_batch(s, args.batch, BARE))
            timings["details"].append(await one_batch(s, args.batch, _COMPLETE))
            await s.pool.execute(_PREVIOUS._KEEP_DETAILS_FUNCTION)
            await s.pool.execute(_PREVIOUS._KEEP_DETAILS_TRIGGER)
            timings["trigger"].append(await one_batch(s, args.batch, BARE))
            await s.pool.execute("DROP TRIGGER transactions_keep_details ON transactions")
            await s.pool.execute("DROP FUNCTION pgc_keep_completed_txn_details()")
        details = await s.pool.fetchval("SELECT count(*) FROM completed_txn_details")
    bare_p50 = statistics.median(timings["bare"])
    print(f"completing a batch of {args.batch} transactions, {args.rounds} rounds per variant")
    for name, values in timings.items():
        values.sort()
        p50 = statistics.median(values)
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        ratio = p50 / bare_p50
        print(f"  {name:<8} p50 {p50 * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms  ({ratio:.2f}x bare p50)")
    print(f"  details rows written: {details:,}")


if __name__ == "__main__":
    asyncio.run(main())
