"""Batch read throughput of the `pravega` Spark data source (issue 36), beside one reader of
Pravega's Python client reading the same stream in the same run.

    .venv/bin/python bench/spark_source.py [--size-mb 1024] [--segments 8] [--event-bytes 1024]
        [--rounds 2] [--writers 4] [--keys 128] [--payload random|text] [--profile auto|on|off]

Set-up: a throwaway embedded PostgreSQL (durability on), `serve` with its embedded segment store
on it, one fixed stream of --segments segments holding --size-mb MiB of --event-bytes events,
written by --writers client processes at once over --keys routing keys (bench/_beside_worker.py's
`write`; random payloads by default, because serve lz4-compresses its chunks and text padding
would make the server's side of the read nearly free).

Then --rounds rounds, each part once per round, the order reversed every other round:

spark split=0        Spark local[2]: `load()` and `selectExpr("count(*)", "sum(length(event))")`,
                     one input partition per segment. Summing the lengths makes every event's
                     bytes cross from the source to Spark (a bare count() need not read columns);
                     both figures are checked against what was written.
spark split=default  the same with split_size_bytes at its default (128 MiB).
client reader        one reader of a new reader group of Pravega's Python client, in a process of
                     its own (bench/_beside_worker.py's `catch-up`), reading every event and
                     summing len(event.data()); count and bytes checked.

Spark's time runs from load() (planning included) to the collected sum; the client's from its
reader's creation to its last event. Throughput is events/s and MiB/s of payload. Each part
also gets the CPU seconds it cost: serve (its process tree), PostgreSQL (postmaster and backends,
exited ones included), and the reader: Spark's JVM and its Python workers apart, or the client's
read loop. The table ends with each part's best and median round and the ratio Spark / client.

With --profile auto (the default) and Spark slower than the client, one more Spark read (the
default split, not counted) runs under py-spy attached to Spark's Python workers, and the bench
prints where they spent their samples. A warm-up read of a small stream by both readers comes
first (JVM start, Python workers forked), not counted either.

The machine this ran on has two cores, shared by serve, PostgreSQL, Spark's JVM and its two
tasks: the reader and the server compete for CPU, and the figures are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel
from pyspark.sql import SparkSession

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.embedded_pg import EmbeddedPostgres
from app.streamclient import Span, spans_between
from app.testing.served import ServedProcess, start_served
from app.wiring.supervisor import die_with_parent
from bench._common import create_fixed_stream, throwaway_cluster
from bench.dataplane import children, postgres_pids, tree_pids
from spark.config import PipelineConfig, default_jdbc_jar
from spark.datasource import register
from spark.datasource.connect import open_stream, resolve_cut
from spark.datasource.options import DEFAULT_SPLIT_BYTES, read_options
from spark.datasource.parts import split
from spark.session import build_session

REPO = Path(__file__).resolve().parents[1]
SCOPE = "bench"
STREAM = "big"
WARM_STREAM = "warm"
# Enough to start the JVM's and the workers' code paths. A larger one (64 MiB) did not take away
# the JVM's extra CPU in the first round (about 1 s per GiB more than later rounds), so it is
# kept small; the summary's best round is the steady figure.
WARM_EVENTS = 8_000
MIB = 1024 * 1024
TICKS = os.sysconf("SC_CLK_TCK")
CLIENT_TIMEOUT_S = 900.0
# A hung Spark read is cancelled rather than left to eat the run's time budget.
SPARK_TIMEOUT_S = 900.0
PY_SPY = Path(sys.executable).with_name("py-spy")
SPARK_QUERY = ("count(*) AS events", "sum(length(event)) AS bytes")


# -- CPU accounting ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcCpu:
    parent: int
    own: float  # user + system of the process itself, seconds
    reaped: float  # of the children it has waited for


def proc_cpu(pid: int) -> ProcCpu | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # ppid, then utime, stime, cutime, cstime: fields 4 and 14-17 of stat (1 and 11-14 after ")").
    return ProcCpu(
        int(fields[1]),
        (int(fields[11]) + int(fields[12])) / TICKS,
        (int(fields[13]) + int(fields[14])) / TICKS,
    )


def cpu_of(pids: list[int]) -> dict[int, ProcCpu]:
    return {pid: cpu for pid in pids if (cpu := proc_cpu(pid)) is not None}


def cpu_used(before: dict[int, ProcCpu], now: dict[int, ProcCpu]) -> float:
    """CPU seconds the processes used between two snapshots, counting processes that came and
    went meanwhile through their parent's reaped time (PostgreSQL backends). A process that
    ended is counted once: its time before the first snapshot is taken off again when its
    parent waited for it (the reaped time grew by it); a parent that ignores SIGCHLD (Spark's
    pyspark.daemon) reaps nothing, and what such a child used since the first snapshot is lost."""
    used = sum(
        cpu.own + cpu.reaped - (was.own + was.reaped if (was := before.get(pid)) else 0.0)
        for pid, cpu in now.items()
    )
    for pid, was in before.items():
        parent = now.get(was.parent)
        if pid not in now and parent is not None:
            grown = parent.reaped - before[was.parent].reaped if was.parent in before else 0.0
            if grown >= was.own + was.reaped - 0.02:
                used -= was.own + was.reaped
    return used


Snapshot = dict[str, dict[int, ProcCpu]]


@dataclass
class Meters:
    served: ServedProcess
    cluster: EmbeddedPostgres
    jvm_pid: int | None = None

    def snapshot(self) -> Snapshot:
        groups = {
            "serve": cpu_of(tree_pids(self.served.process.pid)),
            "postgres": cpu_of(postgres_pids(self.cluster)),
        }
        if self.jvm_pid is not None:
            groups["jvm"] = cpu_of([self.jvm_pid])
            # Everything under the JVM but the JVM itself: pyspark.daemon and its workers.
            groups["python"] = cpu_of([p for p in tree_pids(self.jvm_pid) if p != self.jvm_pid])
        return groups

    def since(self, before: Snapshot) -> dict[str, float]:
        now = self.snapshot()
        used = {name: cpu_used(before.get(name, {}), group) for name, group in now.items()}
        if "jvm" in used:
            # The JVM's reaped time is its Python daemons': count it for Python.
            jvm = self.jvm_pid
            assert jvm is not None
            was, is_ = before.get("jvm", {}).get(jvm), now["jvm"].get(jvm)
            if was is not None and is_ is not None:
                moved = is_.reaped - was.reaped
                used["jvm"] -= moved
                used["python"] += moved
        return used


# -- client processes --------------------------------------------------------------------------


async def run_role(role: str, timeout_s: float, **args: Any) -> dict[str, Any]:
    """One role of bench/_beside_worker.py in its own process: its RESULT line. The process is
    killed if this is cancelled (a sibling writer failed) and dies with this one, so no client
    outlives the bench."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench._beside_worker", role, json.dumps(args), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent(os.getpid()),
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        raise RuntimeError(f"client {role} did not finish in {timeout_s:.0f} s") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    results = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    if not results:
        raise RuntimeError(f"client {role} failed ({process.returncode}):\n{err.decode()[-3000:]}")
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


async def write_stream(uri: str, stream: str, events: int, args: argparse.Namespace) -> float:
    """`events` events written by --writers processes at once; the seconds from the first
    writer's first event to the last writer's flush."""
    writers = max(1, min(args.writers, events))
    shares = [events // writers + (1 if w < events % writers else 0) for w in range(writers)]
    # Each writer prepares its payloads before its clock starts; starting them together keeps
    # that preparation out of the write time.
    start_at = time.monotonic() + 3.0 + 0.5 * writers
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                run_role(
                    "write",
                    CLIENT_TIMEOUT_S,
                    uri=uri,
                    scope=SCOPE,
                    stream=stream,
                    count=share,
                    keys=args.keys,
                    size=args.event_bytes,
                    random=args.payload == "random",
                    start_at=start_at,
                )
            )
            for share in shares
        ]
    results = [t.result() for t in tasks]
    assert sum(r["written"] for r in results) == events, results
    return max(r["t1"] for r in results) - min(r["t0"] for r in results)


# -- the parts ---------------------------------------------------------------------------------


@dataclass
class Measured:
    part: str
    round: int
    seconds: float
    events: int
    bytes: int
    partitions: int | None
    cpu: dict[str, float]
    error: str = ""

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds


@dataclass
class Bench:
    args: argparse.Namespace
    served: ServedProcess
    meters: Meters
    want: tuple[int, int]  # (events, payload bytes) of the big stream
    spark: SparkSession | None = None

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.served.grpc_port}"

    def options(self, stream: str, split_bytes: int) -> dict[str, str]:
        return {
            "controller": self.controller,
            "scope": SCOPE,
            "stream": stream,
            "split_size_bytes": str(split_bytes),
        }

    def spark_sum(self, stream: str, split_bytes: int) -> tuple[int, int]:
        """(events, payload bytes) as Spark reads them; blocking."""
        assert self.spark is not None
        spark = self.spark
        watchdog = threading.Timer(SPARK_TIMEOUT_S, spark.sparkContext.cancelAllJobs)
        watchdog.start()
        try:
            frame = spark.read.format("pravega").options(**self.options(stream, split_bytes)).load()
            row = frame.selectExpr(*SPARK_QUERY).collect()[0]
        finally:
            watchdog.cancel()
        return int(row["events"]), int(row["bytes"] or 0)

    async def spark_part(
        self, name: str, round_: int, stream: str, split_bytes: int, want: tuple[int, int]
    ) -> Measured:
        partitions = await planned_partitions(self.options(stream, split_bytes))
        before = self.meters.snapshot()
        began = time.monotonic()
        error = ""
        try:
            events, size = await asyncio.to_thread(self.spark_sum, stream, split_bytes)
        except Exception as exc:  # reported in the table and raised at the end
            events, size, error = 0, 0, _last_lines(exc)
        seconds = time.monotonic() - began
        cpu = self.meters.since(before)
        if not error and (events, size) != want:
            error = f"read {events} events, {size} bytes; written {want[0]} events, {want[1]} bytes"
        return Measured(name, round_, seconds, events, size, partitions, cpu, error)

    async def client_part(self, round_: int, stream: str, want: tuple[int, int], tag: str) -> Measured:
        before = self.meters.snapshot()
        error = ""
        try:
            result = await run_role(
                "catch-up", CLIENT_TIMEOUT_S, uri=self.served.grpc_uri, scope=SCOPE, stream=stream,
                group=f"reader-{tag}", count=want[0], deadline_s=CLIENT_TIMEOUT_S - 60,
            )  # fmt: skip
            events, size = int(result["read"]), int(result["bytes"])
            seconds = float(result["t1"] - result["t0"])
            loop_cpu = float(result["loop_cpu_s"])
        except Exception as exc:  # reported in the table and raised at the end
            events, size, seconds, loop_cpu, error = 0, 0, float("nan"), 0.0, _last_lines(exc)
        cpu = {**self.meters.since(before), "client": loop_cpu}
        cpu.pop("jvm", None)
        cpu.pop("python", None)
        if not error and (events, size) != want:
            error = f"read {events} events, {size} bytes; written {want[0]} events, {want[1]} bytes"
        return Measured("client reader", round_, seconds, events, size, 1, cpu, error)


def _last_lines(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return " | ".join(text[-6:])[-1500:]


async def planned_partitions(options: dict[str, str]) -> int:
    """The input partitions the source plans for these options (its own planning, run here)."""
    parsed = read_options(options)
    async with open_stream(parsed) as segments:
        start = await resolve_cut(segments, parsed.start_cut, "start_stream_cut")
        end = await resolve_cut(segments, parsed.end_cut, "end_stream_cut")
        spans = await spans_between(segments, start, end)
    return len(split(spans, parsed.split_bytes))


async def segment_sizes(controller: str, stream: str) -> list[int]:
    parsed = read_options({"controller": controller, "scope": SCOPE, "stream": stream})
    async with open_stream(parsed) as segments:
        start = await resolve_cut(segments, "earliest", "start_stream_cut")
        end = await resolve_cut(segments, "latest", "end_stream_cut")
        spans = await spans_between(segments, start, end)
    return [span.size for span in spans]


# -- Spark -------------------------------------------------------------------------------------


def start_spark(work: Path) -> tuple[SparkSession, int]:
    """The project's local session (spark/session.py) on two cores, and its JVM's pid."""
    # Spark's Python workers must run this interpreter: it has pyarrow and this checkout.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    config = PipelineConfig(
        db_url="postgresql://unused@127.0.0.1/unused",
        out=work,
        master="local[2]",
        driver_memory="2g",
        jdbc_jar=default_jdbc_jar(),
    )
    spark = build_session(config, app_name="bench-spark-source")
    register(spark)
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    return spark, int(gateway.proc.pid)  # spark-submit execs the JVM: the same pid


def stop_spark(spark: SparkSession) -> None:
    """Stops the context, then the JVM (SparkSession.stop leaves it running until this process
    ends): it exits when its stdin closes, and its Python daemons with it."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    try:
        spark.stop()
    except Exception as exc:  # a JVM already gone (killed with us): only its process is left to reap
        print(f"Spark did not stop cleanly: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if gateway is not None:
            with suppress(Exception):
                gateway.shutdown()
            proc = gateway.proc
            with suppress(Exception):
                proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            SparkContext._gateway = None
            SparkContext._jvm = None


def spark_workers(jvm_pid: int) -> list[int]:
    """The Python workers that run our JVM's tasks: the children of its `pyspark.daemon
    pyspark.worker`, which forks one per task slot and keeps it for the next tasks. The
    other daemons' workers plan the read on the driver's side (and sit blocked in a
    socket read afterwards, which py-spy counts as holding the GIL). Only ours: other Spark
    sessions may run on this machine."""
    found = []
    for daemon in children(jvm_pid):
        with suppress(OSError):
            argv = Path(f"/proc/{daemon}/cmdline").read_bytes().split(b"\0")
            if b"pyspark.daemon" in argv and b"pyspark.worker" in argv:
                found.extend(children(daemon))
    return sorted(found)


# -- profile -----------------------------------------------------------------------------------


async def profile_spark_read(bench: Bench, work: Path, want: tuple[int, int]) -> None:
    """One more Spark read (default split) with py-spy on every Python worker of our JVM."""
    assert bench.meters.jvm_pid is not None
    workers = spark_workers(bench.meters.jvm_pid)
    if not PY_SPY.exists() or not workers:
        print(f"profile: skipped (py-spy at {PY_SPY}: {PY_SPY.exists()}, Spark's Python workers: {workers})")
        return
    outputs = [work / f"py-spy-{pid}.txt" for pid in workers]
    spies: list[asyncio.subprocess.Process] = []
    try:
        with open(work / "py-spy.log", "ab") as log:  # noqa: ASYNC230 - a local file handed to py-spy
            for pid, out in zip(workers, outputs, strict=True):
                # Each worker on its own: py-spy's --subprocesses on the daemon sampled only the
                # daemon once it paused its targets. --gil: only samples of a thread holding the
                # GIL, i.e. running Python (py-spy's own idle test let threads blocked in
                # select, a lock or a socket read through here). --function: one entry per
                # function, not per line.
                command = [str(PY_SPY), "record", "--pid", str(pid), "--gil", "--function"]
                command += ["--format", "raw", "--rate", "100", "--output", str(out)]
                spies.append(
                    await asyncio.create_subprocess_exec(
                        *command, stdout=log, stderr=log, preexec_fn=die_with_parent(os.getpid())
                    )
                )
        await asyncio.sleep(1.0)  # py-spy attaches before the read starts
        measured = await bench.spark_part("spark profiled", 0, STREAM, DEFAULT_SPLIT_BYTES, want)
    finally:
        for spy in spies:
            if spy.returncode is None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for spy in spies:
            try:
                await asyncio.wait_for(spy.wait(), 60)
            except TimeoutError:
                spy.kill()
                await spy.wait()
    unsampled = sorted(set(spark_workers(bench.meters.jvm_pid)) - set(workers))
    print(
        f"\nprofile: one Spark read under py-spy (default split), workers {workers}: "
        f"{measured.seconds:.1f} s, {measured.mib_per_s:.1f} MiB/s {measured.error}"
        + (f"; workers forked during the read, not sampled: {unsampled}" if unsampled else "")
    )
    stacks: Counter[tuple[str, ...]] = Counter()
    for out in outputs:
        if out.exists():
            stacks.update(parse_raw(out.read_text()))
    print_profile(stacks)


def parse_raw(text: str) -> Counter[tuple[str, ...]]:
    """py-spy's raw (collapsed) output: `frame;frame;... count` per line."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(f for f in stack.split(";") if not f.startswith("process "))] += int(count)
    return stacks


# Frames every sample of a thread passes through: they say nothing about where time goes.
_PLUMBING = (
    "<module> ",
    "_run_code ",
    "_run_module_as_main ",
    "manager (daemon",
    "worker (daemon",
    "Thread.",
    "BaseEventLoop.run_forever ",
    "BaseEventLoop._run_once ",
    "Handle._run ",
    "main (worker.py",
    "_FaulthandlerHelper",
)


def print_profile(stacks: Counter[tuple[str, ...]], top: int = 20) -> None:
    # A worker between tasks waits in the daemon's code (a socket read in `manager`), which
    # py-spy --gil still reports: those samples are not work.
    waiting = sum(c for frames, c in stacks.items() if frames and frames[-1].startswith("manager (daemon"))
    stacks = Counter({f: c for f, c in stacks.items() if f and not f[-1].startswith("manager (daemon")})
    total = sum(stacks.values())
    print(f"    {waiting} samples of a worker waiting between tasks left out")
    if not total:
        print("    no samples (py-spy saw no running Python worker)")
        return
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    loop_thread = 0
    for frames, count in stacks.items():
        if frames:
            own[frames[-1]] += count
        # The source's event loop runs on a thread of its own (spark/datasource/loop.py); the
        # task's thread builds the Arrow batches and sends them to the JVM.
        if any(f.startswith("Thread._bootstrap ") for f in frames):
            loop_thread += count
        for frame in set(frames):
            inclusive[frame] += count
    print(
        f"    {total} samples of a Python worker's thread holding the GIL (100 Hz per worker): "
        f"{100 * loop_thread / total:.0f}% on the source's event-loop thread, "
        f"{100 * (total - loop_thread) / total:.0f}% on the task's thread"
    )
    print("    self time (the function on top of the stack; a C call counts for its caller):")
    for frame, count in own.most_common(top):
        print(f"      {100 * count / total:5.1f}%  {frame}")
    print("    inclusive time (the function anywhere on the stack):")
    shown = [(f, c) for f, c in inclusive.most_common() if not f.startswith(_PLUMBING)]
    for frame, count in shown[: top + 10]:
        print(f"      {100 * count / total:5.1f}%  {frame}")


# -- report ------------------------------------------------------------------------------------


def print_row(m: Measured) -> None:
    cpu = m.cpu
    reader = (
        f"client {cpu.get('client', 0):6.1f}"
        if "client" in cpu
        else f"JVM {cpu.get('jvm', 0):5.1f} py {cpu.get('python', 0):5.1f}"
    )
    parts = "" if m.partitions is None else str(m.partitions)
    print(
        f"  {m.part:<21} {m.round:>5} {m.seconds:8.1f} {m.events_per_s:11.0f} {m.mib_per_s:8.1f} "
        f"{parts:>5}  serve {cpu.get('serve', 0):6.1f} PG {cpu.get('postgres', 0):5.1f} {reader}"
        + (f"  ERROR {m.error}" if m.error else ""),
        flush=True,
    )


ROW_HEADER = (
    f"  {'part':<21} {'round':>5} {'seconds':>8} {'events/s':>11} {'MiB/s':>8} {'parts':>5}  "
    "CPU seconds during the part"
)


def print_summary(results: list[Measured]) -> None:
    ok = [m for m in results if not m.error]
    names = list(dict.fromkeys(m.part for m in results))
    client = [m.mib_per_s for m in ok if m.part == "client reader"]
    print("\nsummary (rounds without errors; ratio = this part / the client reader, same statistic)")
    print(
        f"  {'part':<21} {'best MiB/s':>10} {'median MiB/s':>12} {'best ev/s':>10} "
        f"{'ratio best':>10} {'ratio median':>12} {'CPU s/GiB serve+PG':>19} {'reader':>7}"
    )
    for name in names:
        rates = [m.mib_per_s for m in ok if m.part == name]
        if not rates:
            print(f"  {name:<21} every round failed")
            continue
        best, median = max(rates), statistics.median(rates)
        best_eps = max(m.events_per_s for m in ok if m.part == name)
        ratio_best = f"{best / max(client):10.2f}" if client else f"{'-':>10}"
        ratio_median = f"{median / statistics.median(client):12.2f}" if client else f"{'-':>12}"
        runs = [m for m in ok if m.part == name]
        gib = sum(m.bytes for m in runs) / (1024 * MIB)
        server = sum(m.cpu.get("serve", 0) + m.cpu.get("postgres", 0) for m in runs) / gib
        reader = (
            sum(m.cpu.get("jvm", 0) + m.cpu.get("python", 0) + m.cpu.get("client", 0) for m in runs) / gib
        )
        print(
            f"  {name:<21} {best:10.1f} {median:12.1f} {best_eps:10.0f} {ratio_best} {ratio_median} "
            f"{server:19.1f} {reader:7.1f}"
        )


# -- main --------------------------------------------------------------------------------------


@asynccontextmanager
async def served(work: Path) -> AsyncIterator[tuple[EmbeddedPostgres, ServedProcess]]:
    async with throwaway_cluster() as cluster:
        process = await start_served(work, "--db-url", cluster.url(), "--segment-store-port", "0")
        try:
            if not process.segment_store_port:
                raise RuntimeError(f"serve reported no segment-store port:\n{process.log()}")
            yield cluster, process
        finally:
            await process.stop()


async def create_streams(served_: ServedProcess, segments: int) -> None:
    channel = Channel("127.0.0.1", served_.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        for name in (STREAM, WARM_STREAM):
            await create_fixed_stream(stub, pb.StreamInfo(scope=SCOPE, stream=name), segments)
    finally:
        channel.close()


def step_done(what: str, began: float, setup: dict[str, float]) -> None:
    setup[what] = time.monotonic() - began
    print(f"set-up: {what:<38} {setup[what]:7.1f} s", flush=True)


async def prepare(bench: Bench, work: Path, setup: dict[str, float]) -> None:
    """The streams written, Spark started, both readers warmed up."""
    args, served_, meters = bench.args, bench.served, bench.meters
    events, size = bench.want
    await create_streams(served_, args.segments)
    began, before = time.monotonic(), meters.snapshot()
    write_s = await write_stream(served_.grpc_uri, STREAM, events, args)
    used = meters.since(before)
    step_done(f"write {size / MIB:.0f} MiB ({args.writers} writers)", began, setup)
    print(
        f"        writing: {events / write_s:.0f} events/s, {size / MIB / write_s:.1f} MiB/s (first "
        f"event to last flush); CPU serve {used['serve']:.1f} s, PostgreSQL {used['postgres']:.1f} s",
        flush=True,
    )
    began = time.monotonic()
    await write_stream(served_.grpc_uri, WARM_STREAM, WARM_EVENTS, args)
    step_done(f"write the warm-up stream ({WARM_EVENTS} events)", began, setup)
    sizes = await segment_sizes(bench.controller, STREAM)
    print(
        "        segment sizes (MiB): " + " ".join(f"{s / MIB:.1f}" for s in sizes)
        + f"; input partitions at the default split: {len(split_default(sizes))}",
        flush=True,
    )  # fmt: skip

    began = time.monotonic()
    bench.spark, meters.jvm_pid = await asyncio.to_thread(start_spark, work)
    step_done("Spark session (JVM start)", began, setup)

    began = time.monotonic()
    warm = (WARM_EVENTS, WARM_EVENTS * args.event_bytes)
    for measured in (
        await bench.spark_part("warm-up spark", 0, WARM_STREAM, DEFAULT_SPLIT_BYTES, warm),
        await bench.client_part(0, WARM_STREAM, warm, "warm"),
    ):
        if measured.error:
            raise RuntimeError(f"warm-up {measured.part}: {measured.error}")
    step_done("warm-up reads (not counted)", began, setup)


async def measure(bench: Bench, work: Path, results: list[Measured]) -> None:
    parts: list[tuple[str, int | None]] = [
        ("spark split=0", 0),
        ("spark split=default", DEFAULT_SPLIT_BYTES),
        ("client reader", None),
    ]
    print(ROW_HEADER, flush=True)
    for round_ in range(1, bench.args.rounds + 1):
        # Reversed every other round, so a drift in the machine's load (the other engineer's
        # tests) does not always fall on the same part.
        for name, split_bytes in parts if round_ % 2 else parts[::-1]:
            if split_bytes is None:
                measured = await bench.client_part(round_, STREAM, bench.want, f"r{round_}")
            else:
                measured = await bench.spark_part(name, round_, STREAM, split_bytes, bench.want)
            results.append(measured)
            print_row(measured)
    print_summary(results)
    spark_best = max(
        (m.mib_per_s for m in results if m.part.startswith("spark") and not m.error), default=0.0
    )
    client_best = max(
        (m.mib_per_s for m in results if m.part == "client reader" and not m.error), default=0.0
    )
    profile = bench.args.profile
    if profile == "on" or (profile == "auto" and spark_best < client_best):
        await profile_spark_read(bench, work, bench.want)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="MiB of event payload written")
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--event-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writers", type=int, default=4, help="client processes writing at once")
    parser.add_argument("--keys", type=int, default=128, help="routing keys (128 spread well over 8)")
    parser.add_argument("--payload", choices=("random", "text"), default="random")
    parser.add_argument("--profile", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args()
    if args.event_bytes < 32:
        parser.error("--event-bytes is at least 32 (each event starts with its name)")

    events = args.size_mb * MIB // args.event_bytes
    print(
        f"stream {SCOPE}/{STREAM}: {args.segments} fixed segments, {events} events of {args.event_bytes} B "
        f"({events * args.event_bytes / MIB:.0f} MiB of {args.payload} payload) by {args.writers} writers "
        f"over {args.keys} keys; {args.rounds} rounds; {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the start",
        flush=True,
    )
    # SIGTERM (timeout(1), a closed terminal) cancels the run, so the finally blocks stop Spark,
    # serve and PostgreSQL as on an error.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    setup: dict[str, float] = {}
    results: list[Measured] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-spark-source-") as scratch:
        work = Path(scratch)
        async with served(work) as (cluster, served_):
            step_done("PostgreSQL, migrations, serve", began, setup)
            bench = Bench(args, served_, Meters(served_, cluster), (events, events * args.event_bytes))
            try:
                await prepare(bench, work, setup)
                print(f"set-up: {'total':<38} {time.monotonic() - began:7.1f} s\n", flush=True)
                await measure(bench, work, results)
            finally:
                if bench.spark is not None:
                    await asyncio.to_thread(stop_spark, bench.spark)
    print(f"\nwhole run: {time.monotonic() - began:.0f} s; load average at the end {os.getloadavg()[0]:.1f}")
    failed = [m for m in results if m.error]
    if failed:
        raise SystemExit(
            f"{len(failed)} reads failed or read wrong figures: " + "; ".join(m.error for m in failed)
        )


def split_default(sizes: list[int]) -> list[int]:
    return [p.segment_id for p in split([Span(i, 0, s) for i, s in enumerate(sizes)], DEFAULT_SPLIT_BYTES)]


if __name__ == "__main__":
    asyncio.run(main())
