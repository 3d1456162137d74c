"""The two servers bench/beside_pravega.py compares, each with the same face: a controller URI for
the client, a gRPC stub to create and delete streams, the processes whose CPU is the server's,
and the server's memory.

Pravega 0.13 standalone is one JVM (controller, segment store, ZooKeeper, in-memory durable log
and storage): its CPU and RSS are that process's. With `--pravega durable` the JVM also runs a
BookKeeper bookie, which holds the segment store's log on disk (bench/_durable_pravega.py).
`serve` runs on a throwaway embedded PostgreSQL with its durability on (--db-url): its CPU is
serve's process tree and the postmaster's with every child of the postmaster (backends, WAL
writer, checkpointer), which are not serve's children; its memory is the RSS of serve's tree
plus the PSS of PostgreSQL's processes (they share the buffer pool, which RSS would count once
per backend).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
from grpclib.client import Channel
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import start_served
from bench._common import throwaway_cluster
from bench._durable_pravega import start_durable
from bench.dataplane import cpu_seconds, postgres_pids, rss_mb, tree_pids
from tests.conformance.pravega_standalone import start_standalone

SCOPE = "beside"
SAMPLE_EVERY_S = 0.25
# How often the bench asks whether the commits of a round's last transactions completed: the
# figure's precision on a 10 s round, and light enough not to load the server it waits for.
COMMIT_POLL_S = 0.02
READY_TIMEOUT_S = 60.0
# After a pause, how long a server may take to answer a stream's creation again.
RESUMED_TIMEOUT_S = 60.0


def _int64(value: int) -> int:
    """The low 64 bits of `value` as protobuf's signed int64."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def pss_mb(pid: int) -> float:
    """Proportional set size: shared pages split among the processes sharing them."""
    with suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return 0.0


def safe_rss_mb(pid: int) -> float:
    with suppress(OSError):
        return rss_mb(pid)
    return 0.0


@dataclass
class Target:
    name: str
    uri: str
    stub: ControllerServiceStub
    pids: Callable[[], list[int]]
    memory_mb: Callable[[], float]
    idle_memory_mb: float = 0.0
    peak_memory_mb: float = 0.0
    # serve's PostgreSQL (the service role's URL); empty for Pravega.
    db_url: str = ""
    # What the memory is made of (serve: its processes, its PostgreSQL), and those parts at the
    # sample that found the peak; empty for Pravega's one JVM.
    memory_parts: Callable[[], dict[str, float]] | None = None
    peak_memory_parts: dict[str, float] = field(default_factory=dict)
    _sampler: asyncio.Task[None] | None = field(default=None, repr=False)
    _resumes: int = field(default=0, repr=False)

    def cpu(self) -> dict[int, float]:
        return {pid: cpu_seconds(pid) for pid in self.pids()}

    def cpu_used_since(self, before: dict[int, float]) -> float:
        """CPU seconds of the server's processes since `before` (a process that started meanwhile
        counts whole; one that ended meanwhile, a PostgreSQL backend, is lost)."""
        return sum(now - before.get(pid, 0.0) for pid, now in self.cpu().items())

    async def create_stream(self, stream: str, segments: int = 1) -> None:
        status = await self.stub.createStream(
            pb.StreamConfig(
                streamInfo=pb.StreamInfo(scope=SCOPE, stream=stream),
                scalingPolicy=pb.ScalingPolicy(minNumSegments=segments),
            )
        )
        if status.status != pb.CreateStreamStatus.SUCCESS:
            raise RuntimeError(f"{self.name}: createStream {stream}: {status}")

    async def answering_after_pause(self) -> dict[str, float]:
        """`waited_s`: seconds until a stream's creation and deletion succeed. Pravega standalone's
        first createStream after a pause of half a minute fails INTERNAL (its controller's ZooKeeper
        session, in the same JVM, expired while every thread was stopped; its next calls
        succeed, at its usual speed): so a resumed server is asked once before it is measured.
        TimeoutError when a call does not return."""
        began = time.monotonic()
        self._resumes += 1
        stream = f"resumed-{self._resumes}"
        while True:
            try:
                # A call that hangs (seen once on a Pravega resumed many times) ends the round.
                async with asyncio.timeout(RESUMED_TIMEOUT_S):
                    await self.create_stream(stream)
                    await self.delete_stream(stream)
                return {"waited_s": time.monotonic() - began}
            except (GRPCError, RuntimeError):
                if time.monotonic() - began > RESUMED_TIMEOUT_S:
                    raise
                # A failed creation may have created it: deleted before the next attempt.
                with suppress(GRPCError, RuntimeError, TimeoutError):
                    async with asyncio.timeout(RESUMED_TIMEOUT_S):
                        await self.delete_stream(stream)
                await asyncio.sleep(0.5)

    async def commits_completed(self, stream: str, txn_ids: list[int], timeout_s: float) -> float:
        """Waits until each transaction of `txn_ids` is COMMITTED (a commit that returned has only
        been accepted: both servers complete it afterwards); the monotonic time it saw the last.
        Both servers complete a stream's commits in the order they accepted them, so a client's
        last transaction stands for the ones before it."""
        info = pb.StreamInfo(scope=SCOPE, stream=stream)
        pending = [pb.TxnId(highBits=_int64(txn >> 64), lowBits=_int64(txn)) for txn in txn_ids]
        deadline = time.monotonic() + timeout_s
        while pending:
            still = []
            for txn_id in pending:
                state = await self.stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=txn_id))
                if state.state in (pb.TxnState.ABORTING, pb.TxnState.ABORTED, pb.TxnState.UNKNOWN):
                    raise RuntimeError(f"{self.name}: transaction {txn_id} of {stream} is {state}")
                if state.state != pb.TxnState.COMMITTED:
                    still.append(txn_id)
            pending = still
            if pending:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name}: {len(pending)} commits on {stream} not completed in {timeout_s:.0f} s"
                    )
                await asyncio.sleep(COMMIT_POLL_S)
        return time.monotonic()

    async def delete_stream(self, stream: str) -> None:
        """Sealed and deleted, so that neither server holds more than a round's data (Pravega
        standalone keeps its storage in its heap)."""
        info = pb.StreamInfo(scope=SCOPE, stream=stream)
        sealed = await self.stub.sealStream(info)
        if sealed.status != pb.UpdateStreamStatus.SUCCESS:
            raise RuntimeError(f"{self.name}: sealStream {stream}: {sealed}")
        deleted = await self.stub.deleteStream(info)
        if deleted.status != pb.DeleteStreamStatus.SUCCESS:
            raise RuntimeError(f"{self.name}: deleteStream {stream}: {deleted}")

    async def _sample(self) -> None:
        while True:
            await self._sample_once()
            await asyncio.sleep(SAMPLE_EVERY_S)

    async def _sample_once(self) -> None:
        if self.memory_parts is None:
            self.peak_memory_mb = max(self.peak_memory_mb, await asyncio.to_thread(self.memory_mb))
            return
        parts = await asyncio.to_thread(self.memory_parts)
        total = sum(parts.values())
        if total > self.peak_memory_mb:
            self.peak_memory_mb, self.peak_memory_parts = total, parts

    @asynccontextmanager
    async def unsampled(self) -> AsyncIterator[None]:
        """No memory samples while a latency part runs, one after it: reading a process's
        smaps_rollup walks its page tables under its memory map's lock, and PostgreSQL backends
        sampled that way every 250 ms answered a commit 3-10 ms late each time (ack p99.9 of 6-10
        ms with the sampler, under 4 ms without)."""
        if self._sampler is None:
            yield
            return
        self.stop_sampling()
        try:
            yield
        finally:
            await self._sample_once()
            self._sampler = asyncio.get_running_loop().create_task(self._sample())

    async def ready(self) -> None:
        """The bench scope, the idle memory, and the peak sampler from here on."""
        # Pravega logs that it is ready a moment before its controller's gRPC port accepts (seen
        # refused once on a loaded machine).
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
        while True:
            try:
                created = await self.stub.createScope(pb.ScopeInfo(scope=SCOPE))
            except OSError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            else:
                # A durable Pravega's controller answers FAILURE until its segment store's
                # containers have opened their logs.
                if created.status in (pb.CreateScopeStatus.SUCCESS, pb.CreateScopeStatus.SCOPE_EXISTS):
                    break
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"{self.name}: createScope {SCOPE}: {created}")
            await asyncio.sleep(0.5)
        self.idle_memory_mb = self.peak_memory_mb = self.memory_mb()
        self._sampler = asyncio.get_running_loop().create_task(self._sample())

    def stop_sampling(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None


# What --pravega chooses: the standalone (in-memory log and storage, the reference), or
# Pravega with its log in a local BookKeeper (bench/_durable_pravega.py), the journal fsynced as
# soon as nothing more is queued, or after BookKeeper's default group wait.
PRAVEGA_KINDS = ("standalone", "durable", "durable-grouped")


@asynccontextmanager
async def pravega(work: Path, kind: str = "standalone") -> AsyncIterator[Target]:
    """Pravega 0.13 standalone from Maven Central (the conformance suite's class path: its pinned
    protobuf-java, Jersey 2 and Netty), 3 GiB of heap, on free ports; with `kind` durable, its
    log in a local BookKeeper instead of memory."""
    if kind == "standalone":
        standalone = await asyncio.to_thread(start_standalone, work / "pravega")
    else:
        standalone = await asyncio.to_thread(start_durable, work / "pravega", kind == "durable")
    channel = Channel("localhost", standalone.controller_port)
    pid = standalone.process.pid
    target = Target("Pravega", standalone.controller_uri, ControllerServiceStub(channel), lambda: [pid],
                    lambda: safe_rss_mb(pid))  # fmt: skip
    try:
        await target.ready()
        yield target
    finally:
        target.stop_sampling()
        channel.close()
        await asyncio.to_thread(standalone.stop)


@asynccontextmanager
async def serve(work: Path, synchronous_commit: str, processes: int = 1) -> AsyncIterator[Target]:
    """`serve --processes N` (1 by default) from this checkout, its segment store embedded, on a
    throwaway PostgreSQL whose durability is on unless `synchronous_commit` is `off`."""
    async with throwaway_cluster() as cluster:
        if synchronous_commit != "on":
            conn = await asyncpg.connect(cluster.admin_url())
            try:
                await conn.execute(f"ALTER SYSTEM SET synchronous_commit = '{synchronous_commit}'")
                await conn.execute("SELECT pg_reload_conf()")
            finally:
                await conn.close()
        served = await start_served(work, "--db-url", cluster.url(), "--processes", str(processes))
        channel = Channel("127.0.0.1", served.grpc_port)
        root = served.process.pid

        def pids() -> list[int]:
            return tree_pids(root) + postgres_pids(cluster)

        def memory_parts() -> dict[str, float]:
            return {
                "its processes (RSS)": sum(safe_rss_mb(pid) for pid in tree_pids(root)),
                "its PostgreSQL (PSS)": sum(pss_mb(pid) for pid in postgres_pids(cluster)),
            }

        def memory() -> float:
            return sum(memory_parts().values())

        target = Target(
            "serve", served.grpc_uri, ControllerServiceStub(channel), pids, memory, db_url=cluster.url(),
            memory_parts=memory_parts,
        )  # fmt: skip
        try:
            await target.ready()
            yield target
        finally:
            target.stop_sampling()
            channel.close()
            await served.stop()


@asynccontextmanager
async def both(
    synchronous_commit: str, processes: int = 1, pravega_kind: str = "standalone"
) -> AsyncIterator[list[Target]]:
    with tempfile.TemporaryDirectory(prefix="beside-pravega-") as work:
        root = Path(work)
        async with pravega(root, pravega_kind) as jvm:
            (root / "serve").mkdir()
            async with serve(root / "serve", synchronous_commit, processes) as ours:
                yield [jvm, ours]
