"""Shared bench helpers: a throwaway embedded PostgreSQL, a served controller, load loops."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.embedded_pg import EmbeddedPostgres
from app.store.migrate import upgrade_to_head
from app.testing.served import start_served


@asynccontextmanager
async def throwaway_cluster() -> AsyncIterator[EmbeddedPostgres]:
    """A private PostgreSQL with its durability on, migrated to head, removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="pgcontroller-bench-", dir="/tmp"))
    os.chmod(root, 0o755)
    cluster = EmbeddedPostgres(root / "data")
    await asyncio.to_thread(cluster.start)
    try:
        # As the service role, which owns the database (the migrations need no superuser).
        await asyncio.to_thread(upgrade_to_head, cluster.url())
        yield cluster
    finally:
        await asyncio.to_thread(cluster.stop)
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def throwaway_database() -> AsyncIterator[str]:
    async with throwaway_cluster() as cluster:
        # The superuser's: some benchmarks create databases of their own.
        yield cluster.admin_url()


@asynccontextmanager
async def served_controller(scope: str) -> AsyncIterator[tuple[str, ControllerServiceStub]]:
    """A throwaway database, a `pgcontroller serve` subprocess on it with default settings, and
    a stub on one channel with `scope` created: (database URL, stub)."""
    async with throwaway_database() as url:
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", url)
            channel = Channel("127.0.0.1", served.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope=scope))
                yield url, stub
            finally:
                channel.close()
                await served.stop()


async def create_fixed_stream(stub: ControllerServiceStub, info: pb.StreamInfo, segments: int) -> None:
    status = await stub.createStream(
        pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=segments))
    )
    assert status.status == pb.CreateStreamStatus.SUCCESS, (info.stream, status)


@dataclass
class LoadResult:
    name: str
    requests: int
    seconds: float
    latencies_ms: list[float]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        return (
            f"{self.name:<42} {self.throughput:>9.0f} req/s  p50 {self.percentile(0.50):6.2f} ms  "
            f"p99 {self.percentile(0.99):6.2f} ms  (n={self.requests})"
        )


async def closed_loop(
    name: str, call: Callable[[], Awaitable[object]], in_flight: int, seconds: float, warmup_s: float = 1.0
) -> LoadResult:
    """`in_flight` workers each issue calls back to back; only calls after the warm-up count."""
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    start_measuring = loop.time() + warmup_s
    stop_at = start_measuring + seconds

    async def worker() -> None:
        while True:
            began = loop.time()
            if began >= stop_at:
                return
            await call()
            ended = loop.time()
            if began >= start_measuring:
                latencies.append((ended - began) * 1000)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return LoadResult(name, len(latencies), seconds, latencies)


def percentile(values: list[float], q: float) -> float:
    """The same nearest-rank percentile LoadResult uses, for ad-hoc latency lists."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def preload_statements(cluster: EmbeddedPostgres) -> None:
    """Restarts `cluster` with pg_stat_statements loaded, its extension created."""
    conn = await asyncpg.connect(cluster.admin_url())
    try:
        await conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    finally:
        await conn.close()
    await asyncio.to_thread(cluster.stop)
    await asyncio.to_thread(cluster.start)
    conn = await asyncpg.connect(cluster.admin_url())
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    finally:
        await conn.close()
