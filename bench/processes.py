"""getCurrentSegments against `serve --processes 1` and `serve --processes 2` in the same run (both on
one database, measured in alternating rounds so drift of the machine hits both alike), next to the
bare grpclib echo of the same contract, one process and two sharing a port (SO_REUSEPORT): calls/s
each, the two-process ratio, and p50/p99/p99.9 of each (the echoes too: the floors of this machine
for one and for two processes) at the rate one process sustains (paced runs).

    .venv/bin/python bench/processes.py [--rounds 3] [--requests 30000] [--connections 8]
                                        [--in-flight 4] [--paced-seconds 10] [--probe]

Load comes from h2load (bench/_h2load.py) over `--connections` connections with `--in-flight`
calls each: SO_REUSEPORT spreads connections, not calls, so one connection would reach one process.
The paced runs come two ways: "spread", one h2load per connection so the connections' timers fire
at independent phases as separate clients' would, and "burst", one h2load for every connection,
whose connections share one timer and send together (a burst of `--connections` calls each
period). `--probe` loads bench/_tail_probe into the servers and prints, per paced run, the
collector's pauses, the event loop's busy stretches and slow callbacks, and PostgreSQL
transactions per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import SERVICE_NAME
from app.testing.ports import free_port
from app.testing.served import ServedProcess, start_served
from bench._common import create_fixed_stream, throwaway_database
from bench._h2load import grpc_body, latencies_ms, run_h2load, run_h2load_spread

SEGMENTS = 10
INFO = pb.StreamInfo(scope="bench", stream="s")
# Ten segment ranges: every answer carries some 300 bytes or more.
MIN_ANSWER_BYTES = 300
ROOT = Path(__file__).resolve().parents[1]
PACINGS = ("spread", "burst")
Tail = tuple[float, float, float, int]  # p50, p99, p99.9 in ms, calls


async def start_echo(
    env: dict[str, str] | None = None, copies: int = 1
) -> tuple[list[asyncio.subprocess.Process], int]:
    """`copies` bare echo processes on one port (with more than one, sharing it by SO_REUSEPORT)."""
    port = free_port()
    flags = ["--reuse-port"] if copies > 1 else []
    echoes = []
    for _ in range(copies):
        echo = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bench" / "_echo_server.py"), str(port), *flags,
            stdout=asyncio.subprocess.PIPE, cwd=str(ROOT),
            env={"PYTHONPATH": str(ROOT), **(env or {})},
        )  # fmt: skip
        assert echo.stdout is not None
        await echo.stdout.readline()
        echoes.append(echo)
    return echoes, port


@asynccontextmanager
async def echo_floors(env: dict[str, str] | None = None) -> AsyncIterator[dict[str, tuple[int, list[int]]]]:
    """The bare echo as one process ("echo") and as two sharing one port ("echo 2"), the floors
    for one and two `serve` processes: side -> (port, pids). Stopped on the way out."""
    started: list[asyncio.subprocess.Process] = []
    floors: dict[str, tuple[int, list[int]]] = {}
    try:
        for side, copies in (("echo", 1), ("echo 2", 2)):
            echoes, port = await start_echo(env, copies)
            started += echoes
            floors[side] = (port, [echo.pid for echo in echoes])
        yield floors
    finally:
        for process in started:
            process.terminate()
            await process.wait()


def server_pids(served: ServedProcess, work: Path) -> list[int]:
    """The processes that answer: the children of a supervisor (its ready file names them), else
    the one `serve`."""
    info = json.loads((work / "ready.json").read_text())
    children: list[int] = info.get("processes") or [served.process.pid]
    return children


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (/proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def host_ticks() -> tuple[int, int]:
    """(idle, total) CPU ticks of the whole host so far (/proc/stat), to tell how many cores sat
    idle during a run: none idle means the run was bounded by the host, not by the server."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def p99(values: list[float]) -> float:
    return quantile(sorted(values), 0.99)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    parser.add_argument("--probe", action="store_true", help="load bench/_tail_probe into the servers")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is not installed (apt-get install nghttp2-client)")

    rates: dict[str, list[float]] = {}
    cores: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    tails: dict[tuple[str, str], Tail] = {}
    probes: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as work:
        probe_dir = Path(work) / "probe"
        probe_dir.mkdir()
        env = _probe_env(probe_dir) if args.probe else None
        async with echo_floors(env) as floors, throwaway_database() as url:
            (Path(work) / "one").mkdir()
            (Path(work) / "two").mkdir()
            one = await start_served(Path(work) / "one", "--db-url", url, "--processes", "1", env=env)
            two = await start_served(Path(work) / "two", "--db-url", url, "--processes", "2", env=env)
            try:
                channel = Channel("127.0.0.1", one.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope="bench"))
                await create_fixed_stream(stub, INFO, SEGMENTS)
                channel.close()
                body = Path(work) / "segments.bin"
                body.write_bytes(grpc_body(INFO.SerializeToString()))
                sides: dict[str, int] = {
                    **{side: port for side, (port, _) in floors.items()},
                    "processes 1": one.grpc_port,
                    "processes 2": two.grpc_port,
                }
                pids = {
                    **{side: echo_pids for side, (_, echo_pids) in floors.items()},
                    "processes 1": server_pids(one, Path(work) / "one"),
                    "processes 2": server_pids(two, Path(work) / "two"),
                }
                for _ in range(args.rounds):
                    for side, port in sides.items():
                        target = f"http://127.0.0.1:{port}/{SERVICE_NAME}/getCurrentSegments"
                        used, ticks = cpu_s(pids[side]), host_ticks()
                        run = await run_h2load(
                            target, body, args.requests, args.in_flight, MIN_ANSWER_BYTES,
                            connections=args.connections,
                        )  # fmt: skip
                        used = cpu_s(pids[side]) - used
                        idle_after, total_after = host_ticks()
                        share = (idle_after - ticks[0]) / max(1, total_after - ticks[1])
                        idle.setdefault(side, []).append(share * (os.cpu_count() or 1))
                        rates.setdefault(side, []).append(run.rate)
                        # CPU the server used per wall second of the run: the cores it got.
                        cores.setdefault(side, []).append(used / (run.requests / run.rate))
                sustained = statistics.median(rates["processes 1"])
                for pacing in PACINGS:
                    for side, port in sides.items():
                        await _probe(pids[side], probe_dir, None) if args.probe else None
                        commits = await _commits(url)
                        tails[(pacing, side)] = await paced(port, body, Path(work), sustained, args, pacing)
                        if args.probe:
                            probes[(pacing, side)] = await _probe(pids[side], probe_dir, sustained)
                            calls = tails[(pacing, side)][3]
                            spent = await _commits(url) - commits
                            probes[(pacing, side)].append(
                                f"PostgreSQL: {spent} transactions committed during the run "
                                f"({spent / calls:.3f} per call, background loops included)"
                            )
            finally:
                await two.stop()
                await one.stop()
    report(args, rates, cores, idle, tails, sustained, probes)
    print(f"load average before the run: {' '.join(load)}, after: {' '.join(_loadavg())}")


def _loadavg() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def _probe_env(directory: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "bench" / "_tail_probe"), str(ROOT)])
    return {"PYTHONPATH": path, "PGCONTROLLER_TAIL_PROBE": str(directory)}


async def _commits(url: str) -> int:
    """Transactions committed in the bench's database so far (all backends; the statistics of
    other backends are flushed about once a second, hence the pause)."""
    await asyncio.sleep(1.2)
    connection = await asyncpg.connect(url)
    try:
        value = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return int(value) - 1  # this query's own transaction is not the servers'
    finally:
        await connection.close()


async def _probe(pids: list[int], directory: Path, rate: float | None) -> list[str]:
    """Asks each probed server for what it saw since the last ask (SIGUSR2); with `rate` None,
    only starts a new period. Lines to print, one per process."""
    for pid in pids:
        (directory / f"{pid}.json").unlink(missing_ok=True)
        os.kill(pid, signal.SIGUSR2)
    lines = []
    for pid in pids:
        report = directory / f"{pid}.json"
        for _ in range(200):
            if report.exists():
                break
            await asyncio.sleep(0.01)
        seen = json.loads(report.read_text())
        if rate is None:
            continue
        gc_text = ", ".join(
            f"gen{g} {v['count']}x {v['total_ms']:.0f} ms (CPU {v['cpu_total_ms']:.0f}), "
            f"max {v['max_ms']:.1f} (CPU {v['cpu_max_ms']:.1f}), {v['collected']} freed"
            for g, v in seen["gc"].items()
        )
        slow = "; ".join(
            f"{c['name']} {c['count']}x CPU max {c['cpu_max_ms']:.1f} ms" for c in seen["slow_callbacks"][:6]
        )
        busy, cpu = seen["busy_ms"], seen["busy_cpu_ms"]
        lines += [
            f"pid {pid} collector: {gc_text}; {seen['gen2_objects']} objects in gen2, "
            f"{seen['frozen_objects']} frozen; widest: {', '.join(seen['gen2_widest'])}",
            f"pid {pid} loop: {seen['iterations']} iterations, busy stretch wall p50/p99/p99.9/max "
            f"{busy['0.5']:.2f}/{busy['0.99']:.2f}/{busy['0.999']:.2f}/{seen['busy_max_ms']:.1f} ms "
            f"({seen['busy_over_2ms']} >= 2 ms), CPU {cpu['0.5']:.2f}/{cpu['0.99']:.2f}/{cpu['0.999']:.2f}/"
            f"{seen['busy_cpu_max_ms']:.1f} ms ({seen['busy_cpu_over_2ms']} >= 2 ms)",
            f"pid {pid} callbacks >= 2 ms wall: {slow or 'none'}",
            f"pid {pid} cyclic garbage waiting at the end: {', '.join(seen['garbage']) or 'none'}",
        ]
    return lines


async def paced(
    port: int, body: Path, work: Path, rate: float, args: argparse.Namespace, pacing: str
) -> Tail:
    """(p50, p99, p99.9 in ms, calls) of a run paced at `rate` calls/s over `args.connections`
    connections with one call in flight each, spread or in bursts (see the module's text)."""
    target = f"http://127.0.0.1:{port}/{SERVICE_NAME}/getCurrentSegments"
    if pacing == "spread":
        spread_dir = work / f"spread-{port}"
        spread_dir.mkdir(exist_ok=True)
        logs = await run_h2load_spread(
            target, body, rate, args.paced_seconds, args.connections, MIN_ANSWER_BYTES, spread_dir
        )
    else:
        log = work / f"paced-{port}.log"
        log.unlink(missing_ok=True)
        await run_h2load(
            target, body, int(rate * args.paced_seconds), 1, MIN_ANSWER_BYTES,
            connections=args.connections, rps=rate / args.connections, log_file=log,
        )  # fmt: skip
        logs = [log]
    durations = sorted(d for log in logs for d in latencies_ms(log))
    return quantile(durations, 0.5), quantile(durations, 0.99), quantile(durations, 0.999), len(durations)


def report(
    args: argparse.Namespace,
    rates: dict[str, list[float]],
    cores: dict[str, list[float]],
    idle: dict[str, list[float]],
    tails: dict[tuple[str, str], Tail],
    rate: float,
    probes: dict[tuple[str, str], list[str]],
) -> None:
    print(
        f"getCurrentSegments, h2load {args.connections} connections x {args.in_flight} in flight, "
        f"{args.requests} calls per run, {args.rounds} alternating rounds; median round shown"
    )
    median = {side: statistics.median(runs) for side, runs in rates.items()}
    for side, runs in rates.items():
        shown = ", ".join(f"{r:.0f}" for r in runs)
        of_echo = median[side] / median["echo"]
        used = statistics.median(cores[side])
        print(
            f"  {side:<12} {median[side]:>8.0f} calls/s  ({of_echo:5.1%} of echo; rounds: {shown}); "
            f"server CPU {used:.2f} cores, {median[side] / used:.0f} calls per CPU-second, "
            f"host idle {statistics.median(idle[side]):.2f} cores"
        )
    print(
        f"  processes 2 / processes 1: {median['processes 2'] / median['processes 1']:.2f}x "
        f"(target >= 1.6x); echo 2 / echo: {median['echo 2'] / median['echo']:.2f}x"
    )
    for pacing in PACINGS:
        print(
            f"paced ({pacing}) at {rate:.0f} calls/s (what one process sustains) over {args.connections} "
            f"connections x 1 in flight for {args.paced_seconds:.0f} s; the echoes are the floors:"
        )
        for (shown, side), (p50, p99_ms, p999, calls) in tails.items():
            if shown != pacing:
                continue
            print(
                f"  {side:<12} p50 {p50:6.2f} ms  p99 {p99_ms:6.2f} ms  p99.9 {p999:6.2f} ms  "
                f"({calls} calls; target p99 < 5 ms)"
            )
            for line in probes.get((pacing, side), []):
                print(f"      {line}")


if __name__ == "__main__":
    asyncio.run(main())
