"""The reporting pipeline (spark/) on seeded histories of 1,000,000 and 10,000,000 epoch
records, in local mode on this machine's cores: wall time, rows read per second, and how the
time grows from the small history to the large one (target: at most linearly).

    .venv/bin/python bench/pipeline.py [--epochs 1000000,10000000] [--epochs-per-stream 10000]
        [--master local[*]] [--driver-memory 4g]

Each size is seeded (`pgcontroller dev seed`'s generator: splits, merges, rolling
transactions, truncations, transactions; mark streams included) into a fresh database of one
throwaway embedded PostgreSQL with durable settings, its completed transactions are given
request times (the generator writes no completion details, so there would be no commit
latency to compute), and then measured:

  full   the first run: every row of the views into the lake, marts, charts and summary
  again  a rerun with nothing new (the incremental path's floor)
  new    a rerun after 10,000 more epochs on 2 new streams over the last day (what a daily
         run after a day's activity costs on a history of that size)

One SparkSession serves every run, so the JVM's start (printed once) is not counted in any
run, and a warm-up run on 10,000 epochs first pays for the JVM's compilation of Spark's code
paths, which would otherwise land on the first size alone. Rows are those read from
reporting.scale_events, reporting.segments and reporting.transactions. The database is
dropped after each size; 10M epochs take about 5 GB of disk while they last.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from app.domain.history_gen import SeedSpec
from app.store.seed import seed_history
from bench._common import throwaway_database
from spark.config import PipelineConfig, default_jdbc_jar
from spark.pipeline import RunResult, run
from spark.session import build_session
from tests.spark.expected import fill_txn_details

DAY = 86_400_000


def _database_url(url: str, name: str) -> str:
    return f"{url.rpartition('/')[0]}/{name}"


async def seed(admin_url: str, name: str, epochs: int, per_stream: int) -> tuple[str, float]:
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    url = _database_url(admin_url, name)
    began = time.perf_counter()
    spec = SeedSpec(
        streams=max(1, epochs // per_stream),
        total_epochs=epochs,
        scopes=4,
        # Ends two days ago, so the day added later is newer than everything seeded here.
        start_ms=int(time.time() * 1000) - 32 * DAY,
        span_ms=30 * DAY,
    )
    await seed_history(url, spec)
    conn = await asyncpg.connect(url)
    try:
        await fill_txn_details(conn)
        await conn.execute("ANALYZE completed_txn_details")
    finally:
        await conn.close()
    return url, time.perf_counter() - began


async def add_a_day(url: str) -> None:
    day = SeedSpec(
        streams=2,
        total_epochs=10_000,
        scope_prefix="later",
        start_ms=int(time.time() * 1000) - DAY,
        span_ms=DAY // 2,
    )
    await seed_history(url, day)
    conn = await asyncpg.connect(url)
    try:
        await fill_txn_details(conn)
    finally:
        await conn.close()


async def drop(admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


def report(label: str, epochs: int, result: RunResult) -> None:
    rate = result.rows_read / result.seconds if result.seconds > 0 else 0.0
    print(
        f"{epochs:>12,} epochs  {label:<5}  {result.seconds:8.1f} s  {result.rows_read:>12,} rows  "
        f"{rate:>10,.0f} rows/s  {result.facts_written:>8,} facts",
        flush=True,
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--epochs-per-stream", type=int, default=10_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    sizes = [int(s) for s in args.epochs.split(",") if s.strip()]

    work = Path(tempfile.mkdtemp(prefix="pgcontroller-bench-pipeline-"))
    session_config = PipelineConfig(
        db_url="postgresql://unused@127.0.0.1/unused",
        out=work,
        master=args.master,
        driver_memory=args.driver_memory,
        jdbc_jar=default_jdbc_jar(),
        progress=False,
    )
    began = time.perf_counter()
    spark = build_session(session_config, app_name="pgcontroller-bench")
    print(
        f"Spark {spark.version}, master {args.master} ({spark.sparkContext.defaultParallelism} cores), "
        f"session started in {time.perf_counter() - began:.1f} s",
        flush=True,
    )
    full: dict[int, RunResult] = {}
    try:
        async with throwaway_database() as admin_url:
            warm_url, _ = await seed(admin_url, "pipeline_warmup", 10_000, args.epochs_per_stream)
            warm = PipelineConfig(db_url=warm_url, out=work / "warmup", master=args.master, progress=False)
            warmed = await asyncio.to_thread(run, warm, spark)
            print(f"warm-up run on 10,000 epochs: {warmed.seconds:.1f} s", flush=True)
            await drop(admin_url, "pipeline_warmup")
            for epochs in sizes:
                name = f"pipeline_{epochs}"
                url, seeded_s = await seed(admin_url, name, epochs, args.epochs_per_stream)
                print(f"{epochs:>12,} epochs  seeded in {seeded_s:.1f} s", flush=True)
                try:
                    config = PipelineConfig(
                        db_url=url,
                        out=work / name,
                        master=args.master,
                        driver_memory=args.driver_memory,
                        jdbc_jar=default_jdbc_jar(),
                        progress=False,
                    )
                    full[epochs] = await asyncio.to_thread(run, config, spark)
                    report("full", epochs, full[epochs])
                    report("again", epochs, await asyncio.to_thread(run, config, spark))
                    await add_a_day(url)
                    report("new", epochs, await asyncio.to_thread(run, config, spark))
                finally:
                    await drop(admin_url, name)
                    shutil.rmtree(work / name, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    if len(full) >= 2:
        small, large = min(full), max(full)
        time_ratio = full[large].seconds / full[small].seconds
        size_ratio = full[large].rows_read / full[small].rows_read
        print(
            f"{small:,} -> {large:,} epochs: rows x{size_ratio:.2f}, time x{time_ratio:.2f} "
            f"({'at most' if time_ratio <= size_ratio else 'WORSE than'} linear; target: at most linear)"
        )


if __name__ == "__main__":
    asyncio.run(main())
