"""The data plane, end to end: the real Pravega Python client writing to and reading from a
`pgcontroller serve` subprocess (its embedded segment store over TCP, data in a throwaway
embedded PostgreSQL), each figure next to a bare baseline measured in the same run.

    .venv/bin/python bench/dataplane.py [--events 200000] [--event-size 1024] [--batch 100]
        [--rate 1000] [--latency-seconds 10] [--txn-seconds 10] [--txn-clients 4[,8,16]]
        [--processes 1] [--scales 50] [--skip one,four,latency,txn,scale] [--statements]

serve runs with --processes N (default 1); the CPU of serve is then the supervisor's and all its
children's (the first child holds the embedded segment store, the others reach it over TCP).

one       one writer, one 1-segment stream, --events events of --event-size bytes, acknowledged
          (flushed) at the end: events/s and MB/s; serve's RSS (peak, sampled every 100 ms) and
          the CPU seconds of serve, PostgreSQL (postmaster and backends; a backend that exits
          during the part is not counted) and the client.
          Baseline: one asyncpg connection inserting the same bytes, --batch rows per
          transaction, into a scratch table of the same database.
four      four writers, each on its own 1-segment stream, --events/4 events each at once:
          total MB/s. Baseline: four connections doing the one-writer baseline at once.
latency   one writer at --rate events/s for --latency-seconds (open loop), one reader group
          reading at the tail in another process: send-to-read p50/p99. Baseline: a bare
          asyncio TCP echo of --event-size messages at the same rate (round trip).
txn       --txn-clients client processes, each beginning, writing 10 events into and committing
          transactions back to back for --txn-seconds (one client does one at a time: its rate
          is bound by round trips): committed/s until `completed_txns` holds every one as
          COMMITTED. Baseline: as many connections, each committing transactions of 10 inserts
          of the same bytes, as many as its client committed. A comma-separated --txn-clients
          (1,4,8,16) runs the part once per count on a fresh stream, to show where the rate
          saturates; each run also prints serve's own time per createTransaction,
          commitTransaction and getURI (its gRPC latency histogram), which splits the client's
          begin and commit into what serve takes and what the client waits on besides. With
          --statements the cluster runs pg_stat_statements, and the part prints the statements
          serve and its store ran per committed transaction and their execution time.
scale     --scales manual scales of a 10-segment stream one after another (bench/scale.py's
          part (a)): until the new segments are current, p50/p99; the stores are now reached
          over TCP. Baseline: the issue's figure without TCP (16 ms).

Targets (from the issue): one writer >= 20,000 events/s (20 MB/s); four writers >= 50 MB/s
and >= 50% of their baseline; latency p50 < 10 ms, p99 < 50 ms; >= 500 committed txns/s;
scale p50 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.embedded_pg import EmbeddedPostgres
from app.testing.served import ServedProcess, start_served
from bench._common import create_fixed_stream, percentile, preload_statements, throwaway_cluster
from bench.scale import Failures, latency
from bench.txns import WATCHER, Statements, read_statements, reset_statements

SCOPE = "bench"
REPO = Path(__file__).resolve().parents[1]
CLIENT_TIMEOUT_S = 600.0
MB = 1_000_000
TICKS = os.sysconf("SC_CLK_TCK")


def verdict(ok: bool, target: str) -> str:
    return f"target {target}: {'met' if ok else 'MISSED'}"


# -- processes and /proc ----------------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (direct children only)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants (serve's supervisor and its children)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        todo.extend(children(current))
    return pids


def tree_cpu(pid: int) -> dict[int, float]:
    return {p: cpu_seconds(p) for p in tree_pids(pid)}


def used_since(before: dict[int, float], now: dict[int, float]) -> float:
    """CPU used by the processes of `now` since `before` (a process that exited meanwhile is
    not counted; one that started meanwhile counts whole)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())


STEP_PREFIX = "pravega_controller_transactions_"


async def rpc_seconds(rest_port: int) -> dict[str, tuple[float, float]]:
    """(sum of seconds, count) of serve's gRPC latency histogram per method (status OK), and of
    the transaction steps' histograms under their metric names, from its metrics route; with
    several processes, the one the connection reaches."""
    reader, writer = await asyncio.open_connection("127.0.0.1", rest_port)
    try:
        writer.write(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        body = (await reader.read()).decode()
    finally:
        writer.close()
    found: dict[str, list[float]] = {}
    for line in body.splitlines():
        # The steps inside a transaction's calls (segments created, committed), by metric name.
        step = line.split(" ", 1)[0]
        if step.startswith(STEP_PREFIX) and step.endswith(("_latency_seconds_sum", "_latency_seconds_count")):
            name, value = line.rsplit(" ", 1)
            slot = 0 if name.endswith("_sum") else 1
            found.setdefault(name.rsplit("_", 1)[0], [0.0, 0.0])[slot] = float(value)
            continue
        if line.startswith("pgcontroller_grpc_request_duration_seconds_") and 'status="OK"' in line:
            name, value = line.rsplit(" ", 1)
            method = name.split('method="', 1)[1].split('"', 1)[0]
            slot = 0 if name.split("{", 1)[0].endswith("_sum") else 1
            if name.split("{", 1)[0].endswith(("_sum", "_count")):
                found.setdefault(method, [0.0, 0.0])[slot] = float(value)
    return {method: (pair[0], pair[1]) for method, pair in found.items()}


def cpu_seconds(pid: int) -> float:
    """user + system CPU of one process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15 of stat)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def postgres_pids(cluster: EmbeddedPostgres) -> list[int]:
    """The postmaster and its children (backends, walwriter, checkpointer...)."""
    postmaster = int((cluster.pgdata / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    pids.append(int(entry.name))
    return pids


def postgres_cpu(cluster: EmbeddedPostgres) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in postgres_pids(cluster)}


class RssSampler:
    """Peak RSS of one process, sampled every 100 ms while a part runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mb(pid)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mb(self.pid))
            await asyncio.sleep(0.1)

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def client(role: str, **args: Any) -> dict[str, Any]:
    """Runs one role of tests/support/pravega_worker.py and returns its RESULT."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.pravega_worker",
        role,
        json.dumps(args),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"client {role} did not finish in {CLIENT_TIMEOUT_S}s") from None
    results = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    if not results:
        raise RuntimeError(f"client {role} failed ({process.returncode}):\n{err.decode()[-3000:]}")
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


# -- the served controller ---------------------------------------------------------------------


@dataclass
class Setup:
    cluster: EmbeddedPostgres
    url: str
    served: ServedProcess
    stub: ControllerServiceStub


@asynccontextmanager
async def setup(processes: int = 1, statements: bool = False) -> AsyncIterator[Setup]:
    """A throwaway embedded PostgreSQL with its durability on (acknowledged means durable), a
    `serve` with its embedded segment store on it, and a stub with the bench scope created;
    with `statements`, the cluster runs pg_stat_statements."""
    async with throwaway_cluster() as cluster:
        url = cluster.url()
        if statements:
            await preload_statements(cluster)
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", url, "--processes", str(processes))
            if not served.segment_store_port:
                raise RuntimeError(f"serve reported no segment-store port:\n{served.log()}")
            channel = Channel("127.0.0.1", served.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope=SCOPE))
                yield Setup(cluster, url, served, stub)
            finally:
                channel.close()
                await served.stop()


def print_statements(stats: Statements, committed: int) -> None:
    """Every statement serve and its store ran per committed transaction, and the costliest."""
    total_ms = sum(r.calls * r.mean_ms for r in stats.rows)
    print(
        f"    SQL (pg_stat_statements): {stats.calls / committed:.1f} statements and "
        f"{total_ms / committed:.2f} ms of execution per committed transaction; the costliest:"
    )
    for row in sorted(stats.rows, key=lambda r: r.calls * r.mean_ms, reverse=True)[:8]:
        per_txn_ms = row.calls * row.mean_ms / committed
        print(f"      {row.calls / committed:5.2f}/txn {per_txn_ms:6.3f} ms/txn  {row.text[:90]}")


async def stream(stub: ControllerServiceStub, name: str, segments: int = 1) -> None:
    await create_fixed_stream(stub, pb.StreamInfo(scope=SCOPE, stream=name), segments)


# -- baselines ---------------------------------------------------------------------------------


async def baseline_inserts(url: str, table: str, rows: int, size: int, batch: int) -> float:
    """Seconds for one connection to insert `rows` rows of `size` bytes, `batch` per commit."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id bigserial PRIMARY KEY, data bytea)")
        payload = b"x" * size
        began = time.monotonic()
        for start in range(0, rows, batch):
            async with conn.transaction():
                await conn.executemany(
                    f"INSERT INTO {table} (data) VALUES ($1)",
                    [(payload,) for _ in range(min(batch, rows - start))],
                )
        return time.monotonic() - began
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.close()


async def echo_round_trips(rate: float, seconds: float, size: int) -> list[float]:
    """A bare asyncio TCP echo on loopback, `size`-byte messages at `rate`/s: round trips in ms."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                writer.write(await reader.readexactly(size))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    trips: list[float] = []
    started = loop.time()
    try:
        for index in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, started + index / rate - loop.time()))
            sent = loop.time()
            writer.write(b"x" * size)
            await reader.readexactly(size)
            trips.append((loop.time() - sent) * 1000)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()
    return trips


# -- parts -------------------------------------------------------------------------------------


async def one_writer(s: Setup, args: argparse.Namespace) -> None:
    await stream(s.stub, "one")
    serve_cpu, pg_cpu = tree_cpu(s.served.process.pid), postgres_cpu(s.cluster)
    idle_rss = rss_mb(s.served.process.pid)
    with RssSampler(s.served.process.pid) as rss:
        result = await client(
            "write", uri=s.served.grpc_uri, scope=SCOPE, stream="one", count=args.events, keys=1,
            size=args.event_size, inflight=1000, progress_every=args.events,
        )  # fmt: skip
    serve_used = used_since(serve_cpu, tree_cpu(s.served.process.pid))
    pg_used = sum(now - pg_cpu.get(pid, 0.0) for pid, now in postgres_cpu(s.cluster).items())
    rate = args.events / result["seconds"]
    mbps = rate * args.event_size / MB
    base_s = await baseline_inserts(s.url, "bench_one", args.events, args.event_size, args.batch)
    base_mbps = args.events * args.event_size / MB / base_s
    print(f"one writer, {args.events} x {args.event_size} B events, one segment")
    print(f"    {rate:9.0f} events/s  {mbps:7.1f} MB/s")
    print(f"    baseline (asyncpg, {args.batch} rows per commit): {args.events / base_s:9.0f} rows/s  "
          f"{base_mbps:7.1f} MB/s; writer at {100 * mbps / base_mbps:.0f}% of it")  # fmt: skip
    print(f"    serve RSS: {idle_rss:.0f} MB idle, {rss.peak:.0f} MB peak under the load")
    total = serve_used + pg_used + result["cpu_s"]
    print(
        f"    CPU over the run ({result['seconds']:.1f} s): serve {serve_used:.1f} s "
        f"({100 * serve_used / total:.0f}%), PostgreSQL {pg_used:.1f} s ({100 * pg_used / total:.0f}%), "
        f"client {result['cpu_s']:.1f} s ({100 * result['cpu_s'] / total:.0f}%)"
    )
    print("    " + verdict(rate >= 20_000 and mbps >= 20, ">= 20,000 events/s, 20 MB/s"))


async def four_writers(s: Setup, args: argparse.Namespace) -> None:
    each = args.events // 4
    for i in range(4):
        await stream(s.stub, f"four{i}")
    results = await asyncio.gather(
        *(
            client(
                "write",
                uri=s.served.grpc_uri,
                scope=SCOPE,
                stream=f"four{i}",
                count=each,
                keys=1,
                size=args.event_size,
                inflight=1000,
                progress_every=each,
            )
            for i in range(4)
        )
    )
    span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    mbps = 4 * each * args.event_size / MB / span
    began = time.monotonic()
    await asyncio.gather(
        *(baseline_inserts(s.url, f"bench_four{i}", each, args.event_size, args.batch) for i in range(4))
    )
    base_mbps = 4 * each * args.event_size / MB / (time.monotonic() - began)
    share = 100 * mbps / base_mbps
    print(f"four writers on four segments, {each} x {args.event_size} B events each")
    print(f"    {mbps:7.1f} MB/s in total; baseline (4 connections, {args.batch} rows per commit) "
          f"{base_mbps:7.1f} MB/s: {share:.0f}%")  # fmt: skip
    print("    " + verdict(mbps >= 50 and share >= 50, ">= 50 MB/s and >= 50% of the baseline"))


async def write_read_latency(s: Setup, args: argparse.Namespace) -> None:
    await stream(s.stub, "latency-rw")
    count = int(args.rate * args.latency_seconds)
    with tempfile.TemporaryDirectory() as work:
        reader = asyncio.create_task(
            client(
                "read",
                uri=s.served.grpc_uri,
                scope=SCOPE,
                stream="latency-rw",
                group="lat",
                readers=1,
                deadline_s=args.latency_seconds + 120,
                out=str(Path(work) / "read.json"),
                latency=True,
                stop_after=count,
                until_end=False,
            )
        )
        await asyncio.sleep(3)  # the reader group exists and its reader is at the tail
        await client(
            "paced-write", uri=s.served.grpc_uri, scope=SCOPE, stream="latency-rw", rate=args.rate,
            seconds=args.latency_seconds, size=args.event_size,
        )  # fmt: skip
        seen = await reader
    lat = seen["latencies_ms"]
    trips = await echo_round_trips(args.rate, args.latency_seconds, args.event_size)
    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    print(f"write -> read at {args.rate:g} events/s for {args.latency_seconds:g} s ({len(lat)} events read)")
    print(f"    p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  max {max(lat):6.2f} ms")
    print(f"    baseline (TCP echo round trip, same rate and size): p50 {percentile(trips, 0.5):6.3f} ms  "
          f"p99 {percentile(trips, 0.99):6.3f} ms")  # fmt: skip
    print("    " + verdict(p50 < 10 and p99 < 50, "p50 < 10 ms, p99 < 50 ms"))


async def transactions(s: Setup, args: argparse.Namespace) -> None:
    # A stream per run of this part, so both segment counts can be measured in one serve.
    name = f"txns{args.txn_segments}x{args.txn_clients}"
    await stream(s.stub, name, args.txn_segments)
    conn = await asyncpg.connect(s.url)
    admin = s.cluster.admin_url() if args.statements else None
    await reset_statements(admin)
    load_before = os.getloadavg()[0]
    rpcs_before = await rpc_seconds(s.served.rest_port)
    serve_cpu, pg_cpu = tree_cpu(s.served.process.pid), postgres_cpu(s.cluster)
    try:
        stream_id = await conn.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = $2", SCOPE, name)
        results = await asyncio.gather(
            *(
                client(
                    "txn-load",
                    uri=s.served.grpc_uri,
                    scope=SCOPE,
                    stream=name,
                    size=10,
                    seconds=args.txn_seconds,
                    event_size=args.event_size,
                )
                for _ in range(args.txn_clients)
            )
        )
        committed = sum(r["committed"] for r in results)
        deadline = time.monotonic() + 300
        while (
            done := await conn.fetchval(
                f"{WATCHER} SELECT count(*) FROM completed_txns"
                " WHERE stream_id = $1 AND status = 'COMMITTED'",
                stream_id,
            )
        ) < committed:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done} of {committed} transactions completed")
            await asyncio.sleep(0.01)
        all_done = time.monotonic()
        serve_used = used_since(serve_cpu, tree_cpu(s.served.process.pid))
        rpcs = await rpc_seconds(s.served.rest_port)
        statements = await read_statements(admin)
        pg_used = sum(now - pg_cpu.get(pid, 0.0) for pid, now in postgres_cpu(s.cluster).items())
    finally:
        await conn.close()
    clients_used = sum(r["loop_cpu_s"] for r in results)
    rate = committed / (all_done - min(r["t0"] for r in results))
    began = time.monotonic()
    await asyncio.gather(
        *(
            baseline_inserts(s.url, f"bench_txn{i}", 10 * r["committed"], args.event_size, 10)
            for i, r in enumerate(results)
        )
    )
    base_rate = committed / (time.monotonic() - began)
    print(
        f"transactions of 10 x {args.event_size} B events, {args.txn_segments}-segment stream, "
        f"{args.txn_clients} clients back to back, {args.txn_seconds:g} s, serve --processes "
        f"{args.processes} (load average before: {load_before:.2f}, after: {os.getloadavg()[0]:.2f})"
    )
    print(f"    {rate:7.0f} committed/s (until completed_txns holds all {committed})")
    print(f"    baseline ({args.txn_clients} connections, 10 inserts per commit): {base_rate:7.0f} commits/s")
    each = {k: 1000 * sum(r[k] for r in results) / committed for k in ("begin_s", "write_s", "commit_s")}
    print(
        f"    per transaction in the client: begin {each['begin_s']:.1f} ms, 10 writes "
        f"{each['write_s']:.1f} ms, commit {each['commit_s']:.1f} ms"
    )
    print(
        f"    CPU per committed transaction: serve {1000 * serve_used / committed:.2f} ms, PostgreSQL "
        f"{1000 * pg_used / committed:.2f} ms, clients {1000 * clients_used / committed:.2f} ms"
    )

    def mean_since(key: str, label: str) -> str | None:
        """`label`'s mean time and count since the run began, or None without calls meanwhile."""
        total, calls = rpcs.get(key, (0.0, 0.0))
        was_total, was_calls = rpcs_before.get(key, (0.0, 0.0))
        if calls <= was_calls:
            return None
        return f"{label} {1000 * (total - was_total) / (calls - was_calls):.1f} ms x {calls - was_calls:.0f}"

    methods = ("createTransaction", "commitTransaction", "getURI", "pingTransaction")
    served_ms = [line for m in methods if (line := mean_since(m, m)) is not None]
    view = "" if args.processes == 1 else " (one process's view)"
    print(f"    serve's time per call{view}: " + (", ".join(served_ms) or "no calls seen"))
    step_names = ("created_segments", "committed_segments", "committed")
    steps = [
        line
        for step in step_names
        if (line := mean_since(f"{STEP_PREFIX}{step}_latency_seconds", step)) is not None
    ]
    print(
        "    steps (segments created in createTransaction; the commit worker's batches): "
        + (", ".join(steps) or "none seen")
    )
    if statements is not None:
        print_statements(statements, committed)
    print("    " + verdict(rate >= 500, ">= 500 committed/s"))


async def manual_scale(s: Setup, args: argparse.Namespace) -> None:
    timings = await latency(s.stub, args.scales, 0.002, Failures())
    current = [t.current_ms for t in timings]
    p50 = percentile(current, 0.5)
    print(f"manual scale, {len(timings)} one after another, stores over TCP")
    print(f"    until new segments are current: p50 {p50:6.1f} ms  p99 {percentile(current, 0.99):6.1f} ms")
    print("    baseline: 16 ms p50 before the data plane (segment store in process)")
    print("    " + verdict(p50 < 50, "p50 < 50 ms"))


PARTS = {
    "one": one_writer,
    "four": four_writers,
    "latency": write_read_latency,
    "txn": transactions,
    "scale": manual_scale,
}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000, help="one/four: events written")
    parser.add_argument("--event-size", type=int, default=1024, help="bytes per event")
    parser.add_argument("--batch", type=int, default=100, help="baseline rows per commit")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: events/s")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--txn-seconds", type=float, default=10.0)
    parser.add_argument(
        "--txn-clients",
        default="4",
        help="txn: client processes at once; a list (1,4,16) runs once per count",
    )
    parser.add_argument("--processes", type=int, default=1, help="serve --processes N")
    parser.add_argument("--txn-segments", type=int, default=4, help="txn: segments of the stream")
    parser.add_argument("--scales", type=int, default=50)
    parser.add_argument(
        "--statements", action="store_true", help="txn: SQL statements per transaction (pg_stat_statements)"
    )
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: " + ",".join(PARTS))
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    counts = [int(n) for n in str(args.txn_clients).split(",") if n]
    if not counts or min(counts) < 1 or max(counts) > 64:
        parser.error("--txn-clients takes counts from 1 to 64, comma-separated")
    async with setup(args.processes, args.statements) as s:
        for name, part in PARTS.items():
            if name in skip:
                continue
            if name == "txn":
                for count in counts:
                    await transactions(s, argparse.Namespace(**{**vars(args), "txn_clients": count}))
            else:
                await part(s, args)


if __name__ == "__main__":
    asyncio.run(main())
