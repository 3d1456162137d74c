"""The reporting pipeline (spark/) on seeded histories of 1,000,000 and 10,000,000 epoch
records, in local mode on this machine's cores: wall time, rows read per second against a
bare JDBC read of as many rows, and how the time grows from the small history to the large
one (target: at most linearly).

    .venv/bin/python bench/pipeline.py [--epochs 1000000,10000000] [--epochs-per-stream 10000]
        [--master local[*]] [--driver-memory 4g]

Each size is seeded (`pgcontroller dev seed`'s generator: splits, merges, rolling
transactions, truncations with their history, transactions with their completion details;
mark streams included) into a fresh database of one throwaway embedded PostgreSQL with
durable settings, and then measured:

  full   the first run: every row of the views into the lake, marts, charts and summary
  bare   Spark reading as many rows as `full` read, (stream_id, epoch, creation_time) of the
         plain `epochs` table (repeated as needed), over JDBC in the same stream-id ranges, and
         aggregating them: what moving those rows costs here, without views or facts. The
         pipeline's ratio to it is what its views and its computation cost on top.
  again  a rerun with nothing new (the incremental path's floor)
  new    a rerun after 10,000 more epochs on 2 new streams over the last day (what a daily
         run after a day's activity costs on a history of that size)

One SparkSession serves every run, so the JVM's start (printed once) is not counted in any
run, and a warm-up run on 10,000 epochs first pays for the JVM's compilation of Spark's code
paths, which would otherwise land on the first size alone. Rows are those read from every
event source: reporting.scale_events, reporting.segments, reporting.transactions and
reporting.truncation_history (each printed under `full`). The database is dropped after each
size; 10M epochs take about 5 GB of disk while they last.
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
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pgurl
from app.dev.history_gen import SeedSpec
from app.dev.seed import seed_history
from bench._common import throwaway_database
from spark.config import PipelineConfig, default_jdbc_jar
from spark.jdbc import IdRange, jdbc_target, partition_count, query_rows
from spark.pipeline import RunResult, run
from spark.session import build_session

DAY = 86_400_000


def _database_url(url: str, name: str) -> str:
    return pgurl.parse(url).with_database(name).to_url()


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


async def drop(admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else 0.0


def report(label: str, epochs: int, result: RunResult) -> None:
    print(
        f"{epochs:>12,} epochs  {label:<5}  {result.seconds:8.1f} s  {result.rows_read:>12,} rows  "
        f"{rate(result.rows_read, result.seconds):>10,.0f} rows/s  {result.facts_written:>8,} facts",
        flush=True,
    )


def bare_read(spark: SparkSession, config: PipelineConfig, rows: int) -> float:
    """Seconds Spark takes to read `rows` rows of the plain `epochs` table over JDBC in the
    pipeline's stream-id ranges and aggregate every column (so none is pruned from the query).

    The table is read whole `copies` times plus its first `rest` rows in key order (a row
    predicate, not a LIMIT, which Spark's range predicates would apply after)."""
    if rows <= 0:
        return 0.0
    target = jdbc_target(config.db_url)
    ((low, high, epochs),) = query_rows(
        spark,
        target,
        "SELECT (SELECT min(id) FROM streams)::bigint, (SELECT max(id) FROM streams)::bigint, "
        "(SELECT count(*) FROM epochs)::bigint",
    )
    copies, rest = divmod(rows, epochs)
    where = f"g.copy <= {copies}"
    if rest:
        ((stream_id, epoch),) = query_rows(
            spark,
            target,
            f"SELECT stream_id, epoch FROM epochs ORDER BY stream_id, epoch OFFSET {rest - 1} LIMIT 1",
        )
        where += f" OR (e.stream_id, e.epoch) <= ({stream_id}, {epoch})"
    sql = (
        "SELECT e.stream_id, e.epoch, e.creation_time FROM epochs e "
        f"CROSS JOIN generate_series(1, {copies + (1 if rest else 0)}) AS g(copy) WHERE {where}"
    )
    ids = IdRange(low, high)
    frame = spark.read.jdbc(
        url=target.url,
        table=f"({sql}) AS b",
        column="stream_id",
        lowerBound=low,
        upperBound=high + 1,
        numPartitions=partition_count(ids, config.partitions or spark.sparkContext.defaultParallelism),
        properties=target.properties(fetchsize=str(config.fetch_size)),
    )
    began = time.perf_counter()
    (counted, _, _) = frame.agg(F.count(F.lit(1)), F.sum("epoch"), F.max("creation_time")).collect()[0]
    seconds = time.perf_counter() - began
    assert counted == rows, (counted, rows)
    return seconds


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
                    full[epochs] = result = await asyncio.to_thread(run, config, spark)
                    report("full", epochs, result)
                    print(
                        " " * 21
                        + "read: "
                        + ", ".join(f"{source} {rows:,}" for source, rows in result.rows_by_source.items()),
                        flush=True,
                    )
                    bare_s = await asyncio.to_thread(bare_read, spark, config, result.rows_read)
                    bare_rate = rate(result.rows_read, bare_s)
                    print(
                        f"{epochs:>12,} epochs  bare   {bare_s:8.1f} s  {result.rows_read:>12,} rows  "
                        f"{bare_rate:>10,.0f} rows/s  (the pipeline's rate: "
                        f"{rate(result.rows_read, result.seconds) / max(bare_rate, 1e-9):.2f} x this)",
                        flush=True,
                    )
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
