"""The long-term storage tier, measured: catch-up reads of tiered data beside the same data read
from PostgreSQL, on both backends, and a stream far bigger than what PostgreSQL keeps.

    .venv/bin/python bench/tier.py [--only catch-up,unbounded] [--mb 200] [--rounds 3]
        [--chunk-mib 16] [--unbounded-gb 5]

catch-up   for each of postgres (--tier none), filesystem and s3 (S3Proxy 2.6.0 on this machine,
           started here): a fresh database and `serve`, one writer of --mb MB in 1 KiB events (8
           routing keys) on a 1-segment stream, the storage writer left to catch up, one read
           not counted (S3Proxy's JVM compiles its hot paths during the first), `serve` restarted
           (its read index and read-ahead cold), then --rounds new reader groups each reading the
           whole stream from its head with Pravega's Python client, checking every key's order:
           MB/s, best and median, and the ratio to postgres (the issue's bar: 0.8).
outage     `serve --tier s3 --tier-throttle-bytes 64 MiB`: one writer at 5,000 events/s (1 KiB) for
           --outage-total-s seconds; S3Proxy killed 15 s in and started again --outage-s (60)
           seconds later. Sampled every second: the events acknowledged, serve's RSS, the bytes in
           PostgreSQL, the segment-store health's tier status and the appends delayed; then every
           event read back, in order per key.
unbounded  `serve --tier s3`: one writer of --unbounded-gb GB in 1 KiB events on a 4-segment
           stream; once the storage writer has caught up, PostgreSQL's database size
           (pg_database_size, before and after a plain VACUUM of segment_chunks) against the bytes
           written and the objects' total in the bucket; then `serve` restarted and every event
           read back, in order per key.

Everything runs on this machine at once (client, serve, PostgreSQL, S3Proxy): the figures are
for comparing the tiers, not absolute.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.testing.served import ServedProcess, start_served
from bench._common import throwaway_cluster
from bench.beside_pravega import run_role
from bench.dataplane import rss_mb, tree_pids
from tests.support.dataplane import Controller, restart_on_same_ports
from tests.support.s3proxy import CREDENTIAL, IDENTITY, S3Proxy, running_s3proxy

SCOPE = "tier"
KIB = 1024
KEYS = 8
S3_ENV = {"AWS_ACCESS_KEY_ID": IDENTITY, "AWS_SECRET_ACCESS_KEY": CREDENTIAL, "AWS_REGION": "us-east-1"}


def tier_args(backend: str, work: Path, proxy: S3Proxy | None, chunk_bytes: int) -> list[str]:
    common = ["--tier-chunk-bytes", str(chunk_bytes), "--tier-flush-interval-s", "0.2"]
    if backend == "postgres":
        return []
    if backend == "filesystem":
        return ["--tier", "filesystem", "--tier-directory", str(work / "chunks"), *common]
    assert proxy is not None
    bucket = proxy.bucket(f"bench-{int(time.time() * 1000)}")
    return ["--tier", "s3", "--tier-s3-endpoint", proxy.endpoint, "--tier-s3-bucket", bucket, *common]


@asynccontextmanager
async def served(
    backend: str, work: Path, proxy: S3Proxy | None, chunk_bytes: int
) -> AsyncIterator[dict[str, Any]]:
    """A fresh database and `serve` with the backend's tier: {url, served, args}; `served` may
    be replaced by a restart, which is stopped on the way out."""
    async with throwaway_cluster() as cluster:
        args = ["--db-url", cluster.url(), *tier_args(backend, work, proxy, chunk_bytes)]
        state: dict[str, Any] = {"url": cluster.url(), "args": args, "work": work}
        state["served"] = await start_served(work, *args, env=S3_ENV)
        try:
            yield state
        finally:
            await state["served"].stop()


async def restart(state: dict[str, Any]) -> None:
    before: ServedProcess = state["served"]
    await before.stop()
    state["served"] = await restart_on_same_ports(state["work"], before, *state["args"], env=S3_ENV)


async def create_stream(target: ServedProcess, stream: str, segments: int) -> None:
    controller = Controller(target)
    try:
        await controller.create_stream(SCOPE, stream, segments)
    finally:
        controller.close()


async def write(target: ServedProcess, stream: str, count: int) -> float:
    """Events `e<key>:<seq>|...` of 1 KiB, unique, 8 keys; seconds taken."""
    result = await run_role(
        "tests.support.pravega_worker", "write", uri=target.grpc_uri, scope=SCOPE, stream=stream,
        count=count, keys=KEYS, size=KIB, progress_every=count, inflight=1000,
    )  # fmt: skip
    return float(result["seconds"])


async def in_postgres(url: str, stream: str) -> tuple[int, int]:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT COALESCE(sum(postgres_bytes), 0) AS pg, COALESCE(sum(tiered_bytes), 0) AS tiered "
            "FROM reporting.segment_storage WHERE scope = $1 AND stream = $2",
            SCOPE,
            stream,
        )
        assert row is not None
        return int(row["pg"]), int(row["tiered"])
    finally:
        await conn.close()


async def caught_up(url: str, stream: str, segments: int, chunk_bytes: int, timeout_s: float = 900) -> float:
    started = time.monotonic()
    while True:
        pg, tiered = await in_postgres(url, stream)
        if tiered and pg < segments * chunk_bytes:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"the storage writer left {pg} bytes in PostgreSQL")
        await asyncio.sleep(0.5)


async def verify_read(target: ServedProcess, stream: str, group: str, count: int) -> dict[str, Any]:
    result = await run_role(
        "bench._tier_worker", "verify-read", uri=target.grpc_uri, scope=SCOPE, stream=stream,
        group=group, count=count, keys=KEYS, deadline_s=1800,
    )  # fmt: skip
    if result["out_of_order_or_duplicate"] or not result["complete"]:
        raise AssertionError(f"read back wrong: {result}")
    return result


async def catch_up(args: argparse.Namespace, proxy: S3Proxy, root: Path) -> None:
    count = args.mb * 1024
    chunk_bytes = args.chunk_mib * 1024 * 1024
    figures: dict[str, list[float]] = {}
    for backend in ("postgres", "filesystem", "s3"):
        work = root / f"catch-up-{backend}"
        work.mkdir()
        async with served(backend, work, proxy, chunk_bytes) as state:
            await create_stream(state["served"], "s", 1)
            seconds = await write(state["served"], "s", count)
            lag = 0.0 if backend == "postgres" else await caught_up(state["url"], "s", 1, chunk_bytes)
            pg, tiered = await in_postgres(state["url"], "s")
            print(
                f"  {backend}: wrote {args.mb} MB in {seconds:.1f} s; tier caught up {lag:.1f} s later; "
                f"{pg / 1e6:.1f} MB left in PostgreSQL, {tiered / 1e6:.1f} MB tiered",
                flush=True,
            )
            await restart(state)
            # A first read warms what is cold in every configuration (S3Proxy's JVM above all); not counted.
            await verify_read(state["served"], "s", "warm-up", count)
            await restart(state)
            rates = []
            for round_ in range(args.rounds):
                result = await verify_read(state["served"], "s", f"g{round_}", count)
                rates.append(result["bytes"] / (result["t1"] - result["t0"]) / 1e6)
                print(f"    round {round_ + 1}: {rates[-1]:.0f} MB/s", flush=True)
            figures[backend] = rates
    base = figures["postgres"]
    print(f"\ncatch-up read of {args.mb} MB, 1 KiB events, one reader (Python client), cold read index:")
    print("| read from | best MB/s | median MB/s | ratio to PostgreSQL best / median |")
    print("|---|---|---|---|")
    for backend, rates in figures.items():
        print(
            f"| {backend} | {max(rates):.0f} | {statistics.median(rates):.0f} | "
            f"{max(rates) / max(base):.2f} / {statistics.median(rates) / statistics.median(base):.2f} |"
        )


async def sample(state: dict[str, Any], stream: str) -> dict[str, Any]:
    target: ServedProcess = state["served"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{target.rest_base}/v1/health") as answer:
            details = (await answer.json())["children"]["segment-store"]["details"]
        async with http.get(f"{target.rest_base}/prometheus") as answer:
            metrics = await answer.text()
    delayed = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("pgcontroller_tier_appends_delayed_total")
    )
    pg, _tiered = await in_postgres(state["url"], stream)
    rss = sum(rss_mb(pid) for pid in tree_pids(target.process.pid))
    return {"tier": details.get("tier-status"), "delayed": delayed, "pg_mb": pg / 1e6, "rss_mb": rss}


async def outage(args: argparse.Namespace, proxy: S3Proxy, root: Path) -> None:
    rate, chunk_bytes = 5000, args.chunk_mib * 1024 * 1024
    count = int(rate * args.outage_total_s)
    work = root / "outage"
    work.mkdir()
    async with served("s3", work, proxy, chunk_bytes) as state:
        state["args"] += ["--tier-throttle-bytes", str(64 * 1024 * 1024)]
        await restart(state)
        await create_stream(state["served"], "o", 1)
        writing = run_role(
            "tests.support.pravega_worker", "write", uri=state["served"].grpc_uri, scope=SCOPE, stream="o",
            count=count, keys=KEYS, size=KIB, progress_every=1000, rate=rate,
        )  # fmt: skip
        writer = asyncio.ensure_future(writing)
        started = time.monotonic()
        stopped_at = restarted_at = None
        print(f"\noutage: {count:,} events at {rate}/s; S3Proxy down from 15 s for {args.outage_s:.0f} s")
        print("| s | S3 | tier | MB in PostgreSQL | appends delayed | serve RSS MB |")
        print("|---|---|---|---|---|---|")
        peak_rss = peak_pg = 0.0
        while not writer.done():
            elapsed = time.monotonic() - started
            if stopped_at is None and elapsed >= 15:
                proxy.stop()
                stopped_at = elapsed
            if stopped_at is not None and restarted_at is None and elapsed >= 15 + args.outage_s:
                proxy.start()
                restarted_at = elapsed
            now = await sample(state, "o")
            peak_rss, peak_pg = max(peak_rss, now["rss_mb"]), max(peak_pg, now["pg_mb"])
            s3 = "down" if stopped_at is not None and restarted_at is None else "up"
            if int(elapsed) % 5 == 0:
                print(
                    f"| {elapsed:.0f} | {s3} | {now['tier']} | {now['pg_mb']:.0f} | {now['delayed']:.0f} "
                    f"| {now['rss_mb']:.0f} |",
                    flush=True,
                )
            await asyncio.sleep(1.0)
        if restarted_at is None:
            proxy.start()
        result = await writer
        lag = await caught_up(state["url"], "o", 1, chunk_bytes)
        print(
            f"written in {result['seconds']:.0f} s (unthrottled: {count / rate:.0f} s); peak serve RSS "
            f"{peak_rss:.0f} MB; peak in PostgreSQL {peak_pg:.0f} MB; "
            f"caught up {lag:.0f} s after the last ack",
            flush=True,
        )
        read = await verify_read(state["served"], "o", "all", count)
        print(f"every event read back in order per key: {read['read']:,}")


async def unbounded(args: argparse.Namespace, proxy: S3Proxy, root: Path) -> None:
    count = int(args.unbounded_gb * 1024 * 1024)
    chunk_bytes = args.chunk_mib * 1024 * 1024
    work = root / "unbounded"
    work.mkdir()
    async with served("s3", work, proxy, chunk_bytes) as state:
        await create_stream(state["served"], "big", 4)
        seconds = await write(state["served"], "big", count)
        lag = await caught_up(state["url"], "big", 4, chunk_bytes)
        written = count * KIB
        conn = await asyncpg.connect(state["url"])
        try:
            size_before = int(await conn.fetchval("SELECT pg_database_size(current_database())"))
            await conn.execute("VACUUM segment_chunks")
            size_after = int(await conn.fetchval("SELECT pg_database_size(current_database())"))
            chunks_size = int(await conn.fetchval("SELECT pg_total_relation_size('segment_chunks')"))
        finally:
            await conn.close()
        bucket = state["args"][state["args"].index("--tier-s3-bucket") + 1]
        objects = sum(p.stat().st_size for p in (proxy.objects / bucket).rglob("*") if p.is_file())
        pg, tiered = await in_postgres(state["url"], "big")
        print(
            f"\nunbounded: {written / 1e9:.2f} GB written in {seconds:.0f} s "
            f"({written / seconds / 1e6:.0f} MB/s); the tier caught up {lag:.1f} s after the last ack",
            flush=True,
        )
        print("| figure | bytes | share of the bytes written |")
        print("|---|---|---|")
        for name, value in (
            ("pg_database_size after the writer caught up", size_before),
            ("pg_database_size after VACUUM segment_chunks", size_after),
            ("segment_chunks with its TOAST and indexes", chunks_size),
            ("stream bytes still in PostgreSQL", pg),
            ("stream bytes in the tier (index)", tiered),
            ("objects in the bucket (S3Proxy's files)", objects),
        ):
            print(f"| {name} | {value / 1e6:,.1f} MB | {100 * value / written:.2f}% |")
        await restart(state)
        result = await verify_read(state["served"], "big", "all", count)
        rate = result["bytes"] / (result["t1"] - result["t0"]) / 1e6
        print(
            f"after a restart of serve: {result['read']:,} events read back in order per key "
            f"at {rate:.0f} MB/s"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="catch-up,outage,unbounded")
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--outage-total-s", type=float, default=100.0)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--unbounded-gb", type=float, default=5.0)
    args = parser.parse_args()
    parts = args.only.split(",")
    print(f"tier bench: {' '.join(sys.argv[1:]) or '(defaults)'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as scratch:
        root = Path(scratch)
        with running_s3proxy(root / "s3proxy") as proxy:
            if "catch-up" in parts:
                await catch_up(args, proxy, root)
            if "outage" in parts:
                await outage(args, proxy, root)
            if "unbounded" in parts:
                await unbounded(args, proxy, root)


if __name__ == "__main__":
    asyncio.run(main())
