"""The cost of metrics: getCurrentSegments and createTransaction on two `pgcontroller serve`
processes over the same database, one with `--no-metrics` and one with metrics on (each RPC timed
into the gRPC histogram; createTransaction also counted by the service), in alternating rounds so
drift of the machine hits both alike; then the time of a `/prometheus` scrape with 10,000 streams.

    .venv/bin/python bench/metrics.py [--rounds 3] [--requests 20000] [--txn-requests 4000]
                                      [--in-flight 32] [--streams 10000] [--scrapes 20]

Load comes from h2load (nghttp2-client: one connection, `--in-flight` streams at once); the 10,000
streams are written by `pgcontroller dev seed` (2 epochs each) into the same database.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import SERVICE_NAME
from app.testing.served import ServedProcess, start_served
from bench._common import create_fixed_stream, throwaway_database
from bench._h2load import H2Run, grpc_body, run_h2load

SEGMENTS = 10
INFO = pb.StreamInfo(scope="bench", stream="s")
# A lease long enough that no transaction of a run times out while the run lasts.
TXN_LEASE_MS = 120_000


async def seed(url: str, streams: int) -> float:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "dev", "seed", "--db-url", url, "--streams", str(streams),
        "--scopes", "10", "--epochs-per-stream", "2", "--quiet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out = (await process.communicate())[0].decode()
    if process.returncode != 0:
        raise RuntimeError(f"dev seed failed ({process.returncode}):\n{out}")
    return time.perf_counter() - started


async def scrape_times(rest_port: int, count: int) -> tuple[list[float], int, str]:
    times: list[float] = []
    body = ""
    async with aiohttp.ClientSession() as http:
        for _ in range(count):
            started = time.perf_counter()
            async with http.get(f"http://127.0.0.1:{rest_port}/prometheus") as resp:
                body = await resp.text()
                assert resp.status == 200, body
            times.append((time.perf_counter() - started) * 1000)
    streams = re.search(r"^pgcontroller_streams (\S+)$", body, re.M)
    # Prometheus writes every gauge as a float: 20002.0.
    return times, len(body), f"{float(streams.group(1)):.0f}" if streams else "?"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--txn-requests", type=int, default=4_000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is not installed (apt-get install nghttp2-client)")

    results: dict[tuple[str, str], list[H2Run]] = {}
    async with throwaway_database() as url:
        with tempfile.TemporaryDirectory() as work:
            (Path(work) / "off").mkdir()
            (Path(work) / "on").mkdir()
            off = await start_served(Path(work) / "off", "--db-url", url, "--no-metrics")
            on = await start_served(Path(work) / "on", "--db-url", url)
            try:
                channel = Channel("127.0.0.1", off.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope="bench"))
                await create_fixed_stream(stub, INFO, SEGMENTS)
                channel.close()
                segments_body = Path(work) / "segments.bin"
                segments_body.write_bytes(grpc_body(INFO.SerializeToString()))
                txn_body = Path(work) / "txn.bin"
                txn_body.write_bytes(
                    grpc_body(pb.CreateTxnRequest(streamInfo=INFO, lease=TXN_LEASE_MS).SerializeToString())
                )
                calls = (
                    ("getCurrentSegments", segments_body, args.requests),
                    ("createTransaction", txn_body, args.txn_requests),
                )
                sides: tuple[tuple[str, ServedProcess], ...] = (("off", off), ("on", on))
                for _ in range(args.rounds):
                    for method, body, requests in calls:
                        for side, served in sides:
                            url_ = f"http://127.0.0.1:{served.grpc_port}/{SERVICE_NAME}/{method}"
                            # Both answers carry 10 segment ranges: some 300 bytes or more.
                            result = await run_h2load(url_, body, requests, args.in_flight, 300)
                            results.setdefault((method, side), []).append(result)
                seeded_s = await seed(url, args.streams)
                times, size, streams = await scrape_times(on.rest_port, args.scrapes)
                off_url = f"http://127.0.0.1:{off.rest_port}/prometheus"
                async with aiohttp.ClientSession() as http, http.get(off_url) as resp:
                    off_status = resp.status
            finally:
                await on.stop()
                await off.stop()
    report(args, results, seeded_s, times, size, streams, off_status)


def report(
    args: argparse.Namespace,
    results: dict[tuple[str, str], list[H2Run]],
    seeded_s: float,
    times: list[float],
    size: int,
    streams: str,
    off_status: int,
) -> None:
    print(
        f"metrics off (--no-metrics) vs on, h2load 1 connection, {args.in_flight} in flight, "
        f"{args.rounds} alternating rounds; median round shown"
    )
    for method in ("getCurrentSegments", "createTransaction"):
        median = {}
        for side in ("off", "on"):
            runs = results[(method, side)]
            median[side] = statistics.median(r.rate for r in runs)
            rates = ", ".join(f"{r.rate:.0f}" for r in runs)
            mean = statistics.median(r.mean_ms for r in runs)
            print(
                f"  {method:<20} {side:<3} {median[side]:>8.0f} req/s  mean {mean:6.2f} ms  (rounds: {rates})"
            )
        print(f"  {method:<20} on/off throughput {median['on'] / median['off']:6.1%}")
    times.sort()
    print(
        f"/prometheus with {streams} streams (seeded {args.streams} in {seeded_s:.1f} s): "
        f"{len(times)} scrapes, median {statistics.median(times):.1f} ms, "
        f"max {times[-1]:.1f} ms, body {size} bytes; --no-metrics answers {off_status}"
    )


if __name__ == "__main__":
    asyncio.run(main())
