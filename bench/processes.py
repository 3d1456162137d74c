"""getCurrentSegments against `serve --processes 1` and `serve --processes 2` in the same run (both on
one database, measured in alternating rounds so drift of the machine hits both alike), next to the
bare grpclib echo of the same contract: calls/s each, the two-process ratio, and the p99 of each at
the rate one process sustains (a paced run).

    .venv/bin/python bench/processes.py [--rounds 3] [--requests 30000] [--connections 8]
                                        [--in-flight 4] [--paced-seconds 10]

Load comes from h2load (bench/_h2load.py) over `--connections` connections with `--in-flight`
calls each: SO_REUSEPORT spreads connections, not calls, so one connection would reach one process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import SERVICE_NAME
from app.testing.served import ServedProcess, start_served
from bench._common import create_fixed_stream, free_port, throwaway_database
from bench._h2load import grpc_body, latencies_ms, run_h2load

SEGMENTS = 10
INFO = pb.StreamInfo(scope="bench", stream="s")
# Ten segment ranges: every answer carries some 300 bytes or more.
MIN_ANSWER_BYTES = 300
ROOT = Path(__file__).resolve().parents[1]


async def start_echo() -> tuple[asyncio.subprocess.Process, int]:
    port = free_port()
    echo = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "_echo_server.py"), str(port),
        stdout=asyncio.subprocess.PIPE, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert echo.stdout is not None
    await echo.stdout.readline()
    return echo, port


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


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is not installed (apt-get install nghttp2-client)")

    rates: dict[str, list[float]] = {}
    cores: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    load = Path("/proc/loadavg").read_text().split()[:3]
    tails: dict[str, tuple[float, float, int]] = {}
    echo, echo_port = await start_echo()
    try:
        async with throwaway_database() as url:
            with tempfile.TemporaryDirectory() as work:
                (Path(work) / "one").mkdir()
                (Path(work) / "two").mkdir()
                one = await start_served(Path(work) / "one", "--db-url", url, "--processes", "1")
                two = await start_served(Path(work) / "two", "--db-url", url, "--processes", "2")
                try:
                    channel = Channel("127.0.0.1", one.grpc_port)
                    stub = ControllerServiceStub(channel)
                    await stub.createScope(pb.ScopeInfo(scope="bench"))
                    await create_fixed_stream(stub, INFO, SEGMENTS)
                    channel.close()
                    body = Path(work) / "segments.bin"
                    body.write_bytes(grpc_body(INFO.SerializeToString()))
                    sides: dict[str, int] = {
                        "echo": echo_port,
                        "processes 1": one.grpc_port,
                        "processes 2": two.grpc_port,
                    }
                    pids = {
                        "echo": [echo.pid],
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
                    for side, served in (("processes 1", one), ("processes 2", two)):
                        tails[side] = await paced(served, body, Path(work), sustained, args)
                finally:
                    await two.stop()
                    await one.stop()
    finally:
        echo.terminate()
        await echo.wait()
    report(args, rates, cores, idle, tails)
    print(f"load average before the run: {' '.join(load)} (other work on this host shares its cores)")


async def paced(
    served: ServedProcess, body: Path, work: Path, rate: float, args: argparse.Namespace
) -> tuple[float, float, int]:
    """(p50, p99 in ms, calls) of a run paced at `rate` calls/s over every connection."""
    log = work / f"paced-{served.grpc_port}.log"
    log.unlink(missing_ok=True)
    target = f"http://127.0.0.1:{served.grpc_port}/{SERVICE_NAME}/getCurrentSegments"
    calls = int(rate * args.paced_seconds)
    await run_h2load(
        target, body, calls, args.in_flight, MIN_ANSWER_BYTES,
        connections=args.connections, rps=rate / args.connections, log_file=log,
    )  # fmt: skip
    durations = latencies_ms(log)
    return statistics.median(durations), p99(durations), len(durations)


def report(
    args: argparse.Namespace,
    rates: dict[str, list[float]],
    cores: dict[str, list[float]],
    idle: dict[str, list[float]],
    tails: dict[str, tuple[float, float, int]],
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
        f"  processes 2 / processes 1: {median['processes 2'] / median['processes 1']:.2f}x (target >= 1.6x)"
    )
    rate = median["processes 1"]
    print(f"paced at {rate:.0f} calls/s (what one process sustains) for {args.paced_seconds:.0f} s:")
    for side, (p50, p99_ms, calls) in tails.items():
        print(f"  {side:<12} p50 {p50:6.2f} ms  p99 {p99_ms:6.2f} ms  ({calls} calls; target p99 < 5 ms)")


if __name__ == "__main__":
    asyncio.run(main())
