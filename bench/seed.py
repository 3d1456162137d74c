"""The history generator (`pgcontroller dev seed`): epochs written per second, against a
throwaway embedded PostgreSQL with its normal (durable) settings.

    .venv/bin/python bench/seed.py [--epochs 100000,1000000] [--epochs-per-stream 10000]
        [--ten-million]

Each size is seeded into a fresh database of one cluster with the default mix (splits,
merges, rolling transactions, retention cuts and truncations with their history, transactions
with their completion details, mark streams, segment-store rows) and ANALYZE at the end, then
the database is dropped. The projected time
for 10,000,000 epochs assumes the rate of the largest size. --ten-million also runs the real
thing at the end (about 5 GB of disk while it lasts).

Target (from the issue): 10 million epoch records in minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

import pgurl
from app.dev.history_gen import SeedSpec
from app.dev.seed import SeedSummary, seed_history
from bench._common import throwaway_database

TEN_MILLION = 10_000_000
DAY = 86_400_000


def _database_url(url: str, name: str) -> str:
    return pgurl.parse(url).with_database(name).to_url()


async def seed_once(admin_url: str, epochs: int, per_stream: int) -> tuple[SeedSummary, int]:
    """Seeds `epochs` epochs into a new database; returns the summary and the database's size."""
    name = f"seed_{epochs}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.execute(f"CREATE DATABASE {name}")
        url = _database_url(admin_url, name)
        streams = max(1, epochs // per_stream)
        spec = SeedSpec(
            streams=streams,
            total_epochs=epochs,
            scopes=4,
            start_ms=int(time.time() * 1000) - 30 * DAY,
            span_ms=30 * DAY,
        )
        summary = await seed_history(url, spec)
        size = await admin.fetchval("SELECT pg_database_size($1)", name)
        return summary, int(size)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


def report(summary: SeedSummary, size: int) -> None:
    rows = sum(summary.rows.values())
    print(
        f"{summary.epochs:>12,} epochs  {summary.streams:>6,} streams  {summary.seconds:8.1f} s  "
        f"{summary.epochs_per_s:>9,.0f} epochs/s  {rows:>12,} rows  {size / 2**30:6.2f} GiB"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", default="100000,1000000", help="comma-separated sizes")
    parser.add_argument("--epochs-per-stream", type=int, default=10_000)
    parser.add_argument("--ten-million", action="store_true", help="also seed 10,000,000 epochs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.epochs.split(",") if s.strip()]
    async with throwaway_database() as url:
        rate = 0.0
        for epochs in sizes:
            summary, size = await seed_once(url, epochs, args.epochs_per_stream)
            report(summary, size)
            rate = summary.epochs_per_s
        if rate > 0:
            print(f"projected for {TEN_MILLION:,} epochs at the last rate: {TEN_MILLION / rate / 60:.1f} min")
        if args.ten_million:
            summary, size = await seed_once(url, TEN_MILLION, args.epochs_per_stream)
            report(summary, size)


if __name__ == "__main__":
    asyncio.run(main())
