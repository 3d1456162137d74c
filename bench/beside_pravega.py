"""The data path beside Pravega 0.13 standalone: the same parts, through the same client (Pravega's
Python client 0.3.8, one process per client), against Pravega standalone and against `serve` from
this checkout, both running at once on this machine, in one run; each figure for both and the ratio.
During each round the server not being measured runs at nice 19 (--other-nice), so that its own
background work takes only the cycles the measured one leaves (bench/_niceness.py; needs root);
`--other paused` stops it instead (SIGSTOP on every one of its processes, SIGCONT after:
bench/_pausing.py, which says what that shows and what it does to Pravega). A round starts only
once that server has used under a quarter of a core for half a second (at most 30 s of waiting;
the round's line says when it waited): what its own last round left it to do is not done in (or
paused into) the other's.

Pravega standalone keeps its log and storage in memory, so its acknowledgement is not durable
where serve's is; `--pravega durable` runs Pravega with its log in a local BookKeeper bookie on the
same disk instead (bench/_durable_pravega.py), as a production Pravega acknowledges.

    .venv/bin/python bench/beside_pravega.py [--quick] [--only PARTS] [--rounds N]
        [--events 100000] [--catch-up-mb 200] [--synchronous-commit on|off] [--other niced|paused]
        [--other-nice 19]
        [--pravega standalone|durable|durable-grouped]

Every part runs a warm-up round on each server first (the --quick sizes, not counted), then
--rounds rounds alternating between the servers (Pravega, serve; serve, Pravega; ...). The table
gives each server's best round and the median of its rounds, and the ratio serve / Pravega of each
(for throughput higher is better, for latency, CPU and memory lower is). Each round writes to
streams of its own, sealed and deleted after it on both servers. A round that fails on a server
(its client gave up) is reported, left out of the table and listed at the end; the run goes on
and ends with exit status 1.

Parts (--only takes a comma-separated list of these names):

one       one writer, one segment, --events events of 1 KiB, one flush at the end: events/s; the
          server's CPU per event written (Pravega: the JVM; serve: its process tree, and the
          embedded PostgreSQL's postmaster and all its children).
four      four writers at once, each on a stream of its own, --events/4 each: events/s in total.
random    as `one`, with events of random bytes (the other parts pad events with text, which
          serve's lz4-compressed chunks shrink; Pravega stores bytes as they come).
java      Pravega's Java client (bench/java/LoadWriter.java, run as a source file on the Java
          conformance suite's class path): one writer of --events events, then four on four
          streams; the Java writer pipelines its appends where the Python client's has one
          block in flight at a time.
sixteen   one writer on a 16-segment stream, 16 routing keys, --events events.
catch-up  a stream of --catch-up-mb MB (1 KiB events) written once per server, then read from its
          head by a new reader group each round: events/s and MB/s; the server's CPU per event
          read. The issue names 1 GB; the default here is 200 MB so that a default run stays near
          15 minutes on two cores (--catch-up-mb 1000 for the issue's size).
tail      open loop: a writer at 1,000 and at 10,000 events/s (send times on a fixed schedule,
          each event carrying its send time) and a reader of a group parked at the tail in
          another process: write -> read latency p50/p99, and the rate the writer achieved.
ack       write one 1 KiB event and flush it, one after another: p50/p99. In serve's rounds,
          after the client's acks, the same number of 1 KiB rows each inserted and committed
          alone on serve's own PostgreSQL (asyncpg, no serve in the path): the floor of any
          acknowledgement that means a durable commit on this machine, printed after the table
          next to Pravega's ack (bench/ack_floor.py splits the layers further).
txn       transactions of 10 x 1 KiB events (begin, write, commit) back to back, with 1 and 8
          client processes: transactions committed per second (commit returned; as the client
          sees it on both servers). A returned commit was only accepted: both servers complete
          it afterwards (COMMITTING, then COMMITTED). The round ends when every client's last
          transaction is COMMITTED (asked every 20 ms), so no server's commits left over run
          into the other's next round; and the same transactions over the time until then
          make a second figure: transactions committed per second, the work done.
memory    not a part: each server's memory when idle after start and at its peak over the run
          (sampled every 250 ms, but not during the latency parts `tail`, `ack` and
          `tail-slice`: once after each of their rounds). Pravega: the JVM's RSS (3 GiB heap
          allowed). serve: the RSS of its process tree plus the PSS of its PostgreSQL's processes.

Every part but `java` is through the Python client, and each throughput part prints the client's
CPU as a share of one core, so a figure whose client sat near 100% is the client's ceiling as much
as the server's; `java` runs the Java client's writer against both servers alike.
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
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._beside_servers import PRAVEGA_KINDS, SCOPE, Target, both
from bench._common import percentile
from bench._niceness import can_restore, lowered
from bench._pausing import paused

REPO = Path(__file__).resolve().parents[1]
CLIENT_TIMEOUT_S = 900.0
KIB = 1024
MB = 1_000_000
TAIL_RATES = (1_000, 10_000)
TXN_CLIENTS = (1, 8)
# Far longer than any completion seen: both servers completed their last commits within 0.2 s of
# their clients' end (the completed figures within 1.5% of the returned ones).
COMMITS_COMPLETE_TIMEOUT_S = 120.0
# Before each round the server not measured gets up to QUIET_WAIT_S to finish what its own last
# round left it: Pravega's JVM used 50-100% of a core for 2-6 s after a round of 8 transaction
# clients (5-16% when idle), and once 84% of a core through all of serve's next round, at nice 19.
# The round starts once it used under QUIET_SHARE of a core over QUIET_WINDOW_S.
QUIET_SHARE = 0.25
QUIET_WINDOW_S = 0.5
QUIET_WAIT_S = 30.0
# The tail reader's group must exist, and its reader be parked, before the writer starts.
READER_SETTLE_S = 3.0
# Clients that load a server together start at one instant this far ahead: a Python client
# process takes a second or two to start on a busy two-core machine.
TOGETHER_IN_S = 4.0


@dataclass(frozen=True)
class Sizes:
    events: int
    catch_up_mb: int
    tail_seconds: float
    acks: int
    txn_seconds: float

    @property
    def catch_up_events(self) -> int:
        return self.catch_up_mb * MB // KIB


# The warm-up round of every part: enough for the JVM's JIT and both servers' connections and pools.
WARM = Sizes(events=5_000, catch_up_mb=5, tail_seconds=1.0, acks=50, txn_seconds=1.0)
QUICK = Sizes(events=20_000, catch_up_mb=20, tail_seconds=2.0, acks=300, txn_seconds=2.0)
DEFAULT = Sizes(events=100_000, catch_up_mb=200, tail_seconds=10.0, acks=2_000, txn_seconds=10.0)


@dataclass(frozen=True)
class Figure:
    label: str
    unit: str
    better: str  # "higher", "lower", or "" for a figure that only explains the others


def _txn_figures(clients: int) -> dict[str, Figure]:
    who = f"{clients} client{'s' if clients > 1 else ''}"
    return {
        f"txn{clients}": Figure(f"transactions of 10 events, {who}", "txn/s", "higher"),
        f"txn{clients}_completed": Figure("  the same until the last commit completed", "txn/s", "higher"),
    }


FIGURES: dict[str, Figure] = {
    "one_eps": Figure("one writer, 1 KiB events, flush at end", "events/s", "higher"),
    "one_client": Figure("  its client's CPU", "% of a core", ""),
    "cpu_write": Figure("server CPU per event written (one writer)", "µs", "lower"),
    "four_eps": Figure("four writers on four streams, in total", "events/s", "higher"),
    "four_client": Figure("  their clients' CPU, summed", "% of a core", ""),
    "random_eps": Figure("one writer, 1 KiB events of random bytes", "events/s", "higher"),
    "cpu_write_random": Figure("server CPU per random event written", "µs", "lower"),
    "java_one_eps": Figure("Java client: one writer, 1 KiB events", "events/s", "higher"),
    "java_four_eps": Figure("Java client: four writers on four streams", "events/s", "higher"),
    "sixteen_eps": Figure("one writer, 16 segments, 16 keys", "events/s", "higher"),
    "sixteen_client": Figure("  its client's CPU", "% of a core", ""),
    "catch_up_eps": Figure("catch-up read from the head", "events/s", "higher"),
    "catch_up_mbps": Figure("  the same in MB/s", "MB/s", "higher"),
    "catch_up_client": Figure("  its client's CPU", "% of a core", ""),
    "cpu_read": Figure("server CPU per event read (catch-up)", "µs", "lower"),
    **{
        key: figure
        for rate in TAIL_RATES
        for key, figure in (
            (f"tail{rate}_p50", Figure(f"write -> read at {rate:,}/s, p50", "ms", "lower")),
            (f"tail{rate}_p99", Figure(f"write -> read at {rate:,}/s, p99", "ms", "lower")),
            (f"tail{rate}_rate", Figure("  rate the writer achieved", "events/s", "")),
        )
    },
    "tail_slice": Figure("Pravega's test_ReadfromTail: first slice held both events", "of 20", "higher"),
    "ack_p50": Figure("write + flush of one event (ack), p50", "ms", "lower"),
    "ack_p99": Figure("write + flush of one event (ack), p99", "ms", "lower"),
    **{key: figure for n in TXN_CLIENTS for key, figure in _txn_figures(n).items()},
}

Result = dict[str, float]


async def run_role(module: str, role: str, **args: Any) -> dict[str, Any]:
    """One role of a Pravega-client worker module in a process of its own: its RESULT line."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, role, json.dumps(args), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), CLIENT_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"{module} {role} did not finish in {CLIENT_TIMEOUT_S:.0f} s") from None
    results = [line for line in out.decode().splitlines() if line.startswith("RESULT ")]
    if not results:
        raise RuntimeError(f"{module} {role} failed ({process.returncode}):\n{err.decode()[-3000:]}")
    result: dict[str, Any] = json.loads(results[-1][len("RESULT ") :])
    return result


async def ours(role: str, target: Target, **args: Any) -> dict[str, Any]:
    return await run_role("bench._beside_worker", role, uri=target.uri, scope=SCOPE, **args)


async def suite(role: str, target: Target, **args: Any) -> dict[str, Any]:
    return await run_role("tests.support.pravega_worker", role, uri=target.uri, scope=SCOPE, **args)


def warn_late(target: Target, part: str, results: list[dict[str, Any]]) -> None:
    late = max(r["late_s"] for r in results)
    if late > 0.05:
        print(
            f"  warning: {part} on {target.name}: a client started {late:.2f} s after the others", flush=True
        )


def client_share(*results: dict[str, Any]) -> float:
    return 100 * sum(float(r["loop_cpu_s"]) / float(r["t1"] - r["t0"]) for r in results)


# -- parts -------------------------------------------------------------------------------------


async def one_writer(target: Target, sizes: Sizes, tag: str) -> Result:
    stream = f"one-{tag}"
    await target.create_stream(stream)
    cpu = target.cpu()
    result = await ours("write", target, stream=stream, count=sizes.events, keys=1, size=KIB)
    used = target.cpu_used_since(cpu)
    await target.delete_stream(stream)
    return {
        "one_eps": sizes.events / (result["t1"] - result["t0"]),
        "one_client": client_share(result),
        "cpu_write": 1e6 * used / sizes.events,
    }


async def one_writer_random(target: Target, sizes: Sizes, tag: str) -> Result:
    """The one-writer part with payloads that do not compress (the other parts pad events with
    text, which PostgreSQL's lz4 TOAST compression shrinks; Pravega stores bytes as they come)."""
    stream = f"random-{tag}"
    await target.create_stream(stream)
    cpu = target.cpu()
    result = await ours("write", target, stream=stream, count=sizes.events, keys=1, size=KIB, random=True)
    used = target.cpu_used_since(cpu)
    await target.delete_stream(stream)
    events_per_s = sizes.events / (result["t1"] - result["t0"])
    return {"random_eps": events_per_s, "cpu_write_random": 1e6 * used / sizes.events}


JAVA_WRITER = Path(__file__).resolve().parent / "java" / "LoadWriter.java"
_java_classpath: str | None = None


async def java_classpath() -> str:
    """The Java conformance suite's class path (Pravega's Java client 0.13, pinned as the suite
    pins it), built by Maven once."""
    global _java_classpath
    if _java_classpath is None:
        from tests.conformance.maven import SUITE, classpath

        _java_classpath = await asyncio.to_thread(classpath, SUITE, package=True)
    return _java_classpath


async def java_write(target: Target, stream: str, count: int, start_at_ms: int) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        "java", "-Xmx512m", "-cp", await java_classpath(), str(JAVA_WRITER),
        target.uri, SCOPE, stream, str(count), str(KIB), str(start_at_ms),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 600)
    if process.returncode != 0:
        failure = err.decode()[-2000:]
        raise RuntimeError(f"LoadWriter on {target.name} failed ({process.returncode}): {failure}")
    line = [text for text in out.decode().splitlines() if text.startswith("{")][-1]
    result: dict[str, Any] = json.loads(line)
    return result


async def java_writers(target: Target, sizes: Sizes, tag: str) -> Result:
    """One writer, then four on four streams, of Pravega's Java client (bench/java/LoadWriter.java):
    a client that pipelines its appends, where the Python client's has one block in flight."""
    one = f"java1-{tag}"
    await target.create_stream(one)
    # The JVM starts and the writer sets up before the shared start (its compile takes seconds).
    alone = await java_write(target, one, sizes.events, int(time.time() * 1000) + 8_000)
    await target.delete_stream(one)
    streams = [f"java4{i}-{tag}" for i in range(4)]
    for stream in streams:
        await target.create_stream(stream)
    start_at_ms = int(time.time() * 1000) + 12_000
    each = sizes.events // 4
    results = await asyncio.gather(*(java_write(target, stream, each, start_at_ms) for stream in streams))
    for stream in streams:
        await target.delete_stream(stream)
    return {
        "java_one_eps": sizes.events / alone["seconds"],
        "java_four_eps": 4 * each / max(r["seconds"] + r["late_s"] for r in results),
    }


async def four_writers(target: Target, sizes: Sizes, tag: str) -> Result:
    streams = [f"four{i}-{tag}" for i in range(4)]
    each = sizes.events // 4
    for stream in streams:
        await target.create_stream(stream)
    start_at = time.monotonic() + TOGETHER_IN_S
    results = await asyncio.gather(
        *(
            ours("write", target, stream=stream, count=each, keys=1, size=KIB, start_at=start_at)
            for stream in streams
        )
    )
    warn_late(target, "four", results)
    for stream in streams:
        await target.delete_stream(stream)
    span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    return {"four_eps": 4 * each / span, "four_client": client_share(*results)}


async def sixteen_keys(target: Target, sizes: Sizes, tag: str) -> Result:
    stream = f"sixteen-{tag}"
    await target.create_stream(stream, segments=16)
    result = await ours("write", target, stream=stream, count=sizes.events, keys=16, size=KIB)
    await target.delete_stream(stream)
    return {
        "sixteen_eps": sizes.events / (result["t1"] - result["t0"]),
        "sixteen_client": client_share(result),
    }


CATCH_UP_STREAM = "catch-up"


async def write_catch_up_stream(target: Target, sizes: Sizes) -> None:
    """Written once per server; every round (and the warm-up, a smaller one) reads from its head."""
    await target.create_stream(CATCH_UP_STREAM)
    await ours("write", target, stream=CATCH_UP_STREAM, count=sizes.catch_up_events, keys=1, size=KIB)


async def catch_up_read(target: Target, sizes: Sizes, tag: str) -> Result:
    count = sizes.catch_up_events
    cpu = target.cpu()
    result = await ours("catch-up", target, stream=CATCH_UP_STREAM, group=f"catch-up-{tag}",
                        count=count, deadline_s=CLIENT_TIMEOUT_S - 60)  # fmt: skip
    used = target.cpu_used_since(cpu)
    seconds = result["t1"] - result["t0"]
    return {
        "catch_up_eps": count / seconds,
        "catch_up_mbps": result["bytes"] / MB / seconds,
        "catch_up_client": client_share(result),
        "cpu_read": 1e6 * used / count,
    }


async def tail_latency(target: Target, sizes: Sizes, tag: str) -> Result:
    figures: Result = {}
    for rate in TAIL_RATES:
        stream = f"tail{rate}-{tag}"
        await target.create_stream(stream)
        count = int(rate * sizes.tail_seconds)
        with_reader = asyncio.create_task(
            suite(
                "read",
                target,
                stream=stream,
                group=f"tail{rate}-{tag}",
                readers=1,
                latency=True,
                stop_after=count,
                until_end=False,
                deadline_s=sizes.tail_seconds + 120,
                out=os.devnull,
            )
        )
        await asyncio.sleep(READER_SETTLE_S)
        written = await suite("paced-write", target, stream=stream, rate=rate, seconds=sizes.tail_seconds,
                              size=KIB)  # fmt: skip
        seen = await with_reader
        await target.delete_stream(stream)
        latencies = seen["latencies_ms"]
        if len(latencies) < count:
            raise RuntimeError(f"{target.name}: the tail reader saw {len(latencies)} of {count} events")
        figures |= {
            f"tail{rate}_p50": percentile(latencies, 0.50),
            f"tail{rate}_p99": percentile(latencies, 0.99),
            f"tail{rate}_rate": written["written"] / written["seconds"],
        }
    return figures


async def ack_latency(target: Target, sizes: Sizes, tag: str) -> Result:
    stream = f"ack-{tag}"
    await target.create_stream(stream)
    result = await ours("ack", target, stream=stream, count=sizes.acks, skip=20, size=KIB)
    await target.delete_stream(stream)
    latencies = result["latencies_ms"]
    figures = {"ack_p50": percentile(latencies, 0.50), "ack_p99": percentile(latencies, 0.99)}
    if target.db_url:
        floor = await lone_commits(target.db_url, sizes.acks)
        figures |= {"ack_floor_p50": percentile(floor, 0.50), "ack_floor_p99": percentile(floor, 0.99)}
    return figures


FLOOR_TABLE = "bench_ack_floor"
FLOOR_WARM_UP = 20


async def lone_commits(db_url: str, count: int) -> list[float]:
    """Milliseconds of each of `count` 1 KiB rows inserted and committed alone (autocommit), one
    after another, on one connection: what PostgreSQL's durable commit costs with nothing of serve
    in the path. The table is emptied after, so rounds do not grow it."""
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, data bytea NOT NULL)"
        )
        insert = await conn.prepare(f"INSERT INTO {FLOOR_TABLE} (data) VALUES ($1)")
        data = b"a" * KIB
        for _ in range(FLOOR_WARM_UP):
            await insert.fetch(data)
        latencies: list[float] = []
        for _ in range(count):
            began = time.perf_counter_ns()
            await insert.fetch(data)
            latencies.append((time.perf_counter_ns() - began) / 1e6)
        await conn.execute(f"TRUNCATE {FLOOR_TABLE}")
        return latencies
    finally:
        await conn.close()


async def transactions(target: Target, sizes: Sizes, tag: str) -> Result:
    figures: Result = {}
    for clients in TXN_CLIENTS:
        stream = f"txn{clients}-{tag}"
        await target.create_stream(stream)
        start_at = time.monotonic() + TOGETHER_IN_S if clients > 1 else None
        results = await asyncio.gather(
            *(
                ours(
                    "txn",
                    target,
                    stream=stream,
                    size=10,
                    seconds=sizes.txn_seconds,
                    event_size=KIB,
                    writer_id=index + 1,
                    start_at=start_at,
                )
                for index in range(clients)
            )
        )
        warn_late(target, f"txn{clients}", results)
        last_txns = [int(r["last_txn"]) for r in results if r["last_txn"] is not None]
        completed_at = await target.commits_completed(stream, last_txns, COMMITS_COMPLETE_TIMEOUT_S)
        await target.delete_stream(stream)
        began = min(r["t0"] for r in results)
        committed = sum(r["committed"] for r in results)
        figures[f"txn{clients}"] = committed / (max(r["t1"] for r in results) - began)
        figures[f"txn{clients}_completed"] = committed / (completed_at - began)
    return figures


TAIL_SLICE_RUNS = 20


async def tail_slice(target: Target, sizes: Sizes, tag: str) -> Result:
    """Pravega's Python client test `test_ReadfromTail` 20 times: its first slice is expected to
    hold both events written at the tail (the writer sends the second only once the first is
    acknowledged, so it holds both only if the reader's first read comes after both)."""
    result = await suite("tail-slice", target, stream=f"tail-slice-{tag}", group=f"tail-slice-{tag}",
                        count=TAIL_SLICE_RUNS)  # fmt: skip
    print(f"    first slices' sizes on {target.name}: {result['sizes']}")
    for index in range(TAIL_SLICE_RUNS):
        await target.delete_stream(f"tail-slice-{tag}-{index}")
    return {"tail_slice": float(result["both"])}


@dataclass(frozen=True)
class Part:
    run: Callable[[Target, Sizes, str], Awaitable[Result]]
    prepare: Callable[[Target, Sizes], Awaitable[None]] | None = None
    # Measures latency: the memory sampler pauses meanwhile (Target.unsampled says why).
    latency: bool = False


PRAVEGA_DESCRIPTIONS = {
    "standalone": "Pravega 0.13.0 standalone (one JVM, in-memory log and storage: not durable)",
    "durable": "Pravega 0.13.0 with a durable log (one JVM, its log in a local BookKeeper bookie, "
    "the journal fsynced as soon as nothing more is queued; storage on the file system)",
    "durable-grouped": "Pravega 0.13.0 with a durable log (one JVM, its log in a local BookKeeper "
    "bookie, the journal fsynced after BookKeeper's default group wait; storage on the file system)",
}

PARTS: dict[str, Part] = {
    "one": Part(one_writer),
    "random": Part(one_writer_random),
    "four": Part(four_writers),
    "java": Part(java_writers),
    "sixteen": Part(sixteen_keys),
    "catch-up": Part(catch_up_read, write_catch_up_stream),
    "tail": Part(tail_latency, latency=True),
    "ack": Part(ack_latency, latency=True),
    "tail-slice": Part(tail_slice, latency=True),
    "txn": Part(transactions),
}


# -- rounds and the table ----------------------------------------------------------------------


def best(key: str, values: list[float]) -> float:
    return min(values) if FIGURES[key].better == "lower" else max(values)


def shown(value: float, unit: str) -> str:
    if unit in ("events/s", "txn/s"):
        return f"{value / 1000:.1f}k" if value >= 10_000 else f"{value:.0f}"
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def ratio(ours_value: float, theirs: float) -> str:
    return f"{ours_value / theirs:.2f}" if theirs else "-"


def table(rounds: dict[str, dict[str, list[float]]], memory: dict[str, tuple[float, float]]) -> list[str]:
    """Markdown rows: figure | Pravega best / median | serve best / median | ratio best / median."""
    lines = [
        "| figure | unit | better | Pravega best / median | serve best / median "
        "| ratio serve/Pravega best / median |",
        "|---|---|---|---|---|---|",
    ]
    for key, figure in FIGURES.items():
        theirs, mine = rounds["Pravega"].get(key), rounds["serve"].get(key)
        if not theirs or not mine:
            continue
        if figure.better:
            t_best, m_best = best(key, theirs), best(key, mine)
            best_ratio = ratio(m_best, t_best)
        else:
            t_best = m_best = float("nan")
            best_ratio = "-"
        t_med, m_med = statistics.median(theirs), statistics.median(mine)
        cells = [
            f"{shown(t_best, figure.unit)} / {shown(t_med, figure.unit)}"
            if figure.better
            else shown(t_med, figure.unit),
            f"{shown(m_best, figure.unit)} / {shown(m_med, figure.unit)}"
            if figure.better
            else shown(m_med, figure.unit),
            f"{best_ratio} / {ratio(m_med, t_med)}",
        ]
        lines.append(
            f"| {figure.label} | {figure.unit} | {figure.better or '(context)'} | " + " | ".join(cells) + " |"
        )
    for index, label in enumerate(("memory, idle after start", "memory, peak over the run")):
        theirs_mb, mine_mb = memory["Pravega"][index], memory["serve"][index]
        lines.append(
            f"| {label} | MB | lower | {theirs_mb:.0f} | {mine_mb:.0f} | {ratio(mine_mb, theirs_mb)} |"
        )
    return lines


def ack_floor_lines(rounds: dict[str, dict[str, list[float]]]) -> list[str]:
    """The durable commit's own floor (serve's rounds of `ack`) beside Pravega's ack: whether the
    ack bar is within reach of any server whose acknowledgement is a PostgreSQL commit here."""
    floor_p50, floor_p99 = rounds["serve"].get("ack_floor_p50"), rounds["serve"].get("ack_floor_p99")
    if not floor_p50 or not floor_p99:
        return []
    line = (
        "PostgreSQL alone on serve's cluster, a 1 KiB row committed on its own (the floor of a "
        f"durable ack), best / median of serve's ack rounds: p50 {min(floor_p50):.2f} / "
        f"{statistics.median(floor_p50):.2f} ms, p99 {min(floor_p99):.2f} / "
        f"{statistics.median(floor_p99):.2f} ms"
    )
    theirs = rounds["Pravega"].get("ack_p99")
    if theirs:
        line += f"; Pravega's ack p99 {min(theirs):.2f} / {statistics.median(theirs):.2f} ms"
    return [line + ".", ""]


async def quiet_down(others: list[Target]) -> float:
    """Seconds waited until every server of `others` used under QUIET_SHARE of a core over
    QUIET_WINDOW_S (at most QUIET_WAIT_S): a round starts once the other server has finished
    what its own last round left it."""
    began = time.monotonic()
    while time.monotonic() - began < QUIET_WAIT_S:
        before = [(other, other.cpu()) for other in others]
        window_began = time.monotonic()
        await asyncio.sleep(QUIET_WINDOW_S)
        window = time.monotonic() - window_began
        if all(other.cpu_used_since(cpu) / window < QUIET_SHARE for other, cpu in before):
            break
    return time.monotonic() - began


@dataclass(frozen=True)
class OtherServer:
    """What happens to the server not being measured during the other's rounds."""

    paused: bool
    nice: int


async def run_part(
    name: str,
    part: Part,
    targets: list[Target],
    sizes: Sizes,
    rounds: int,
    found: dict[str, dict[str, list[float]]],
    other: OtherServer,
    failures: list[str],
) -> None:
    """A round that fails on a server (its client gave up: a write timed out, a worker died) is
    reported and left out; the part goes on with its other rounds, and the run with its other
    parts. A server whose preparation failed sits the part out."""

    def others_set_aside(target: Target) -> AbstractContextManager[None]:
        pid_lists = [server.pids for server in targets if server is not target]
        return paused(pid_lists) if other.paused else lowered(pid_lists, other.nice)

    async def attempt(target: Target, what: str, step: Awaitable[Result | None]) -> tuple[bool, Result]:
        """(whether `step` succeeded, its figures)."""
        try:
            return True, await step or {}
        except Exception as exc:  # reported; the figures go on without this round
            failure = f"{name} {what} on {target.name}: {type(exc).__name__}: {str(exc)[:300]}"
            failures.append(failure)
            print(f"  FAILED: {failure}", flush=True)
            return False, {}

    async def answering(target: Target) -> bool:
        """A server that was paused answers before it is measured (Target.answering_after_pause)."""
        if not other.paused:
            return True
        answered, figures = await attempt(target, "resumption", target.answering_after_pause())
        if answered and figures["waited_s"] > 1.0:
            print(f"  {name}: {target.name} answered {figures['waited_s']:.1f} s after its pause", flush=True)
        return answered

    ready: list[Target] = []
    for target in targets:
        with others_set_aside(target):
            if not await answering(target):
                continue
            if part.prepare is not None:
                began = time.monotonic()
                prepared, _ = await attempt(target, "preparation", part.prepare(target, sizes))
                if not prepared:
                    continue
                print(f"  {name}: {target.name} prepared in {time.monotonic() - began:.1f} s", flush=True)
            await attempt(target, "warm-up", part.run(target, WARM, f"{name}-warm"))
            ready.append(target)
    for index in range(rounds):
        order = ready if index % 2 == 0 else ready[::-1]
        for target in order:
            waited = await quiet_down([server for server in targets if server is not target])
            # The one not measured still uses the same two cores (a JVM's collector, a PostgreSQL's
            # checkpoint or autovacuum), at a low priority unless --other-nice 0, or is stopped with
            # --other paused (bench/_pausing.py); the round shows how much it took.
            with others_set_aside(target):
                if not await answering(target):
                    continue
                began = time.monotonic()
                others = [(server, server.cpu()) for server in targets if server is not target]
                async with target.unsampled() if part.latency else nullcontext():
                    ran, result = await attempt(
                        target, f"round {index + 1}", part.run(target, sizes, f"{name}-r{index}")
                    )
            if not ran:
                continue
            took = time.monotonic() - began
            for key, value in result.items():
                found[target.name].setdefault(key, []).append(value)
            summary = ", ".join(f"{key} {value:.4g}" for key, value in result.items())
            meanwhile = ", ".join(
                f"meanwhile {server.name} used {100 * server.cpu_used_since(cpu) / took:.0f}% of a core"
                for server, cpu in others
            )
            if waited > QUIET_WINDOW_S * 1.5:
                meanwhile = f"started after {waited:.1f} s for the other to quiet down; {meanwhile}"
            print(f"  {name} round {index + 1} {target.name} ({took:.0f} s): {summary} ({meanwhile})",
                  flush=True)  # fmt: skip


def checkout() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "app"], cwd=REPO, capture_output=True, text=True)
    return head.stdout.strip() + (" (app/ has uncommitted changes)" if dirty.stdout.strip() else "")


async def main() -> int:
    """1 when a round failed (the table lacks it), else 0."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 rounds (a few minutes)")
    parser.add_argument("--only", default="", help="comma-separated parts: " + ",".join(PARTS))
    parser.add_argument("--rounds", type=int, help="counted rounds per part (default 3, --quick 2)")
    parser.add_argument("--events", type=int, help="events per round of one/four/sixteen")
    parser.add_argument("--catch-up-mb", type=int, help="size of the catch-up stream (default 200)")
    parser.add_argument("--synchronous-commit", choices=("on", "off"), default="on",
                        help="serve's PostgreSQL (off: acks no longer durable, for reference)")  # fmt: skip
    parser.add_argument("--processes", type=int, default=1,
                        help="serve's --processes: its gRPC and segment store in N processes")  # fmt: skip
    parser.add_argument("--other", choices=("niced", "paused"), default="niced",
                        help="the server not being measured, during the other's rounds: niced "
                        "(default, at --other-nice) or paused (SIGSTOP, SIGCONT after; see "
                        "bench/_pausing.py for what it does to Pravega)")  # fmt: skip
    parser.add_argument("--other-nice", type=int, default=19, choices=range(20), metavar="0-19",
                        help="with --other niced, the nice value of the server not being measured "
                        "(default 19; 0: both at the same priority throughout)")  # fmt: skip
    parser.add_argument("--pravega", choices=PRAVEGA_KINDS, default="standalone",
                        help="standalone (default: in-memory log and storage, not durable); durable: "
                        "its log in a local BookKeeper bookie, the journal fsynced as soon as nothing "
                        "more is queued; durable-grouped: the same with BookKeeper's default group "
                        "wait (up to 2 ms) before each fsync")  # fmt: skip
    args = parser.parse_args()
    sizes = QUICK if args.quick else DEFAULT
    sizes = replace(
        sizes, events=args.events or sizes.events, catch_up_mb=args.catch_up_mb or sizes.catch_up_mb
    )
    rounds = args.rounds or (2 if args.quick else 3)
    names = [n for n in args.only.split(",") if n] or list(PARTS)
    unknown = set(names) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; the parts are {','.join(PARTS)}")
    print(f"beside_pravega: {' '.join(sys.argv[1:]) or '(defaults)'}; serve at {checkout()}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"  sizes: {sizes}; {rounds} rounds per part after a warm-up round; serve's PostgreSQL "
          f"synchronous_commit={args.synchronous_commit}")  # fmt: skip
    other = OtherServer(args.other == "paused", args.other_nice if can_restore() else 0)
    if other.paused:
        print("  the server not being measured is paused (SIGSTOP) during the other's rounds")
    else:
        unlowered = "" if other.nice or not args.other_nice else " (lowering it needs root to undo)"
        print(f"  the server not being measured runs at nice {other.nice} during the other's rounds"
              f"{unlowered}")  # fmt: skip
    began = time.monotonic()
    found: dict[str, dict[str, list[float]]] = {"Pravega": {}, "serve": {}}
    failures: list[str] = []
    async with both(args.synchronous_commit, args.processes, args.pravega) as targets:
        print(f"  servers up in {time.monotonic() - began:.0f} s: "
              + ", ".join(f"{t.name} {t.uri}" for t in targets), flush=True)  # fmt: skip
        for name in names:
            await run_part(name, PARTS[name], targets, sizes, rounds, found, other, failures)
        memory = {t.name: (t.idle_memory_mb, t.peak_memory_mb) for t in targets}
        memory_at_peak = {t.name: t.peak_memory_parts for t in targets if t.peak_memory_parts}
    print()
    durable = "durable" if args.synchronous_commit == "on" else "NOT durable"
    print(
        f"{PRAVEGA_DESCRIPTIONS[args.pravega]} and "
        f"serve --processes {args.processes} ({durable}: PostgreSQL synchronous_commit="
        f"{args.synchronous_commit}), same machine, same client (pravega 0.3.8, Python), best of and "
        f"median over {rounds} rounds:"
    )
    print("\n".join(table(found, memory)))
    print()
    for line in ack_floor_lines(found):
        print(line)
    for name, parts in memory_at_peak.items():
        shares = ", ".join(f"{part} {mb:.0f} MB" for part, mb in parts.items())
        print(f"{name}'s memory at its peak: {shares}.")
    print("Figures are through the Python client but those named 'Java client' (bench/java/LoadWriter.java). "
          "A throughput whose client sat near 100% of a core is bounded by the client too.")  # fmt: skip
    if failures:
        print(f"{len(failures)} failed (left out of the table above):")
        print("\n".join(f"  {failure}" for failure in failures))
    # Others' work on the same two cores moves every figure: the load says how much there was.
    print(f"total {time.monotonic() - began:.0f} s; load average at the end {os.getloadavg()[0]:.2f}")
    return 1 if failures else 0


async def until_terminated() -> int:
    """main(), cancelled by SIGTERM (`timeout`, a CI's kill) as by Ctrl-C: every server is then
    stopped, and one paused or niced for a round is set back first (a process killed outright
    would leave a paused PostgreSQL stopped for good)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main()
    except asyncio.CancelledError:
        print("terminated: servers stopped", flush=True)
        return 143


if __name__ == "__main__":
    sys.exit(asyncio.run(until_terminated()))
