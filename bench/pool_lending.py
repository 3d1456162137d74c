"""What a query's borrowing of a connection costs: the same statement one after another through
asyncpg's own pool (the baseline), through the service's pool (app/store/db.py, whose lender
lends connections given back clean without a round through asyncpg's pool), through the segment
store's patient view of it (app/store/patient_db.py), and on one connection held throughout (no
borrowing at all). Prints wall time and this process's CPU per query, rounds alternating.

    .venv/bin/python bench/pool_lending.py [--queries 5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store.patient_db import PatientDatabase
from app.store.pool import asyncpg_dsn, create_pool
from bench._common import throwaway_cluster

QUERY = "SELECT 1"


async def _no_reset(_connection: asyncpg.Connection) -> None:
    """Pool connections carry no session state: the default reset's round trip buys nothing."""


async def _timed(queries: int, one: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(queries):
        await one()
    return (time.perf_counter() - wall) / queries * 1e6, (time.process_time() - cpu) / queries * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    async with throwaway_cluster() as cluster:
        # As app/store/pool.py configured asyncpg's pool before the lender: no reset query.
        bare = await asyncpg.create_pool(asyncpg_dsn(cluster.url()), min_size=2, max_size=4, reset=_no_reset)
        ours = await create_pool(cluster.url(), max_size=4)
        patient = PatientDatabase(ours, wait_s=5.0)
        held = await bare.acquire()
        try:
            ways: dict[str, Callable[[], Awaitable[object]]] = {
                "asyncpg's pool (baseline)": lambda: bare.fetchval(QUERY),
                "the service's pool (lent)": lambda: ours.fetchval(QUERY),
                "the segment store's patient view": lambda: patient.fetchval(QUERY),
                "one connection held": lambda: held.fetchval(QUERY),
            }
            found: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
            for way in ways.values():  # warm-up: connections opened, statements prepared
                await _timed(200, way)
            for _ in range(args.rounds):
                for name, way in ways.items():
                    found[name].append(await _timed(args.queries, way))
            print(f"{args.queries} x {QUERY!r} per round, {args.rounds} rounds; best / median per query")
            for name, results in found.items():
                walls = sorted(w for w, _ in results)
                cpus = sorted(c for _, c in results)
                print(
                    f"  {name:36} wall {walls[0]:6.0f} / {walls[len(walls) // 2]:6.0f} µs"
                    f"   CPU {cpus[0]:6.0f} / {cpus[len(cpus) // 2]:6.0f} µs"
                )
        finally:
            await bare.release(held)
            await ours.close()
            await bare.close()


if __name__ == "__main__":
    asyncio.run(main())
