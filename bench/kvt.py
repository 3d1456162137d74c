"""Key-value tables through the project's client (app/kvtclient) against a `pgcontroller serve`
subprocess (its embedded segment store over TCP, data in a throwaway embedded PostgreSQL).

    .venv/bin/python bench/kvt.py [--entries 5000] [--partitions 4] [--clients 8] [--races 200]

puts      --entries unconditional puts of 100-byte values, one at a time from one client:
          puts/s and p50/p99 latency; then the same count from --clients concurrent tasks.
gets      --entries gets, one at a time: p50/p99.
iterate   every entry in key order in pages of 100 (the segments merged): entries/s.
races     --races rounds of two clients putting the same key conditioned on the same version:
          rounds with exactly one winner and one BadKeyVersion (must be all of them).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.kvtclient import BadKeyVersion, KeyValueTable, TableKey, Version, create_table
from app.testing.served import start_served
from bench._common import percentile, throwaway_cluster

SCOPE = "bench"


def key(n: int) -> TableKey:
    return TableKey(f"k{n:07d}".encode())


async def timed(calls: list[float], call: Awaitable[object]) -> None:
    start = time.perf_counter()
    await call
    calls.append((time.perf_counter() - start) * 1000)


async def run(args: argparse.Namespace) -> None:
    async with throwaway_cluster() as cluster:
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", cluster.url())
            controller = f"127.0.0.1:{served.grpc_port}"
            channel = Channel("127.0.0.1", served.grpc_port)
            try:
                await ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope=SCOPE))
                await create_table(controller, SCOPE, "t", partitions=args.partitions, primary_key_length=8)
                async with await KeyValueTable.open(controller, SCOPE, "t") as table:
                    await measure(args, controller, table)
            finally:
                channel.close()
                await served.stop()


async def measure(args: argparse.Namespace, controller: str, table: KeyValueTable) -> None:
    n = args.entries
    value = bytes(100)
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(n):
        await timed(latencies, table.put(key(i), value))
    elapsed = time.perf_counter() - start
    print(
        f"puts, one at a time: {n / elapsed:,.0f}/s, p50 {percentile(latencies, 0.50):.2f} ms, "
        f"p99 {percentile(latencies, 0.99):.2f} ms"
    )

    async def writer(part: range) -> None:
        for i in part:
            await table.put(key(i), value)

    start = time.perf_counter()
    await asyncio.gather(*(writer(range(n + c, 2 * n, args.clients)) for c in range(args.clients)))
    elapsed = time.perf_counter() - start
    print(f"puts, {args.clients} tasks at once: {n / elapsed:,.0f}/s")

    latencies = []
    for i in range(n):
        await timed(latencies, table.get(key(i)))
    print(
        f"gets, one at a time: p50 {percentile(latencies, 0.50):.2f} ms, "
        f"p99 {percentile(latencies, 0.99):.2f} ms"
    )

    start = time.perf_counter()
    seen = 0
    async for page in table.entries(page_size=100):
        seen += len(page.entries)
    elapsed = time.perf_counter() - start
    assert seen == 2 * n, seen
    print(f"iterate {seen} entries in key order, pages of 100: {seen / elapsed:,.0f} entries/s")

    clean = 0
    async with await KeyValueTable.open(controller, SCOPE, "t") as other:
        for r in range(args.races):
            seen_entry = await table.get(key(r))
            assert seen_entry is not None
            results = await asyncio.gather(
                table.put(key(r), b"one", seen_entry.version),
                other.put(key(r), b"two", seen_entry.version),
                return_exceptions=True,
            )
            won = sum(isinstance(x, Version) for x in results)
            lost = sum(isinstance(x, BadKeyVersion) for x in results)
            clean += won == 1 and lost == 1
    print(f"conditional-put races: {clean}/{args.races} with exactly one winner and one BadKeyVersion")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--races", type=int, default=200)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
