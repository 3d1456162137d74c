"""The cost of authentication per RPC: getCurrentSegments through two gRPC servers over the same
controller in one run, one with `--auth-enabled` (Basic credentials, Pravega's ACL check, the
cache of verified credentials) and one without, called in alternating rounds; plus the cost of a
first (uncached) verification, which runs Argon2id.

    .venv/bin/python bench/auth.py [--calls 2000] [--concurrency 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.testing.controller import running_controller, serving
from bench._common import throwaway_database

STREAM = pb.StreamInfo(scope="bench", stream="s", accessOperation=pb.StreamInfo.AccessOperation.NONE)


def basic(user: str, password: str) -> str:
    """The `authorization` value of Pravega's Basic method."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def _calls(
    stub: ControllerServiceStub, calls: int, concurrency: int, metadata: dict[str, str] | None
) -> tuple[float, list[float]]:
    """(calls per second, each call's latency in ms)."""
    latencies: list[float] = []
    per_worker = calls // concurrency

    async def worker() -> None:
        for _ in range(per_worker):
            started = time.perf_counter()
            await stub.getCurrentSegments(STREAM, metadata=metadata)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(latencies) / (time.perf_counter() - started), latencies


async def main(calls: int, concurrency: int, rounds: int) -> None:
    async with throwaway_database() as url, running_controller(url) as services:
        await services.scopes.create_scope("bench")
        store = PgAccountStore(services.resources.pool)
        accounts = 50
        for i in range(accounts):
            await store.add(
                f"user{i}", hash_password(f"pw{i}"), "prn::/scope:other,READ;prn::/scope:bench/*,READ", 0
            )
        async with serving(services) as plain, serving(services, auth_enabled=True) as secured:
            plain_channel = Channel("127.0.0.1", plain.grpc_port)
            secured_channel = Channel("127.0.0.1", secured.grpc_port)
            plain_stub, secured_stub = (
                ControllerServiceStub(plain_channel),
                ControllerServiceStub(secured_channel),
            )
            await plain_stub.createStream(
                pb.StreamConfig(streamInfo=STREAM, scalingPolicy=pb.ScalingPolicy(minNumSegments=4))
            )
            # First calls of each account: nothing cached, Argon2id runs (two at a time at most).
            cold: list[float] = []
            for i in range(10):
                started = time.perf_counter()
                await secured_stub.getCurrentSegments(
                    STREAM, metadata={"authorization": basic(f"user{i}", f"pw{i}")}
                )
                cold.append((time.perf_counter() - started) * 1000)
            metadata = {"authorization": basic("user0", "pw0")}
            await _calls(plain_stub, 200, concurrency, None)  # warm both paths
            await _calls(secured_stub, 200, concurrency, metadata)
            off_rates, on_rates, off_lat, on_lat = [], [], [], []
            for _ in range(rounds):
                rate, lat = await _calls(plain_stub, calls, concurrency, None)
                off_rates.append(rate)
                off_lat += lat
                rate, lat = await _calls(secured_stub, calls, concurrency, metadata)
                on_rates.append(rate)
                on_lat += lat
            plain_channel.close()
            secured_channel.close()

    def p(values: list[float], q: float) -> float:
        return statistics.quantiles(values, n=100)[int(q) - 1]

    print(f"getCurrentSegments, {calls} calls x {rounds} rounds, concurrency {concurrency}, one process")
    for label, rates, lat in (("auth off", off_rates, off_lat), ("auth on ", on_rates, on_lat)):
        rate = statistics.median(rates)
        print(f"  {label}: {rate:8.0f} calls/s   p50 {p(lat, 50):6.2f} ms   p99 {p(lat, 99):6.2f} ms")
    cold_median = statistics.median(cold)
    print(
        f"  first call per account (uncached, Argon2id): median {cold_median:.1f} ms, max {max(cold):.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.concurrency, args.rounds))
