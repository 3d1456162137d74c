"""createTransaction and pingTransaction with h2load as the load (no Python client's CPU on the
host), against one `serve` process and against `serve --processes 2` on the same database, next
to a bare grpclib echo answering the same calls from constants (one process, and two sharing a
port as the children of `--processes 2` do) and the bare asyncpg
insert-and-commit baseline of bench/txns.py, all in one run, in alternating rounds.

    .venv/bin/python bench/txn_rpcs.py [--rounds 3] [--seconds 8] [--requests 6000]
        [--connections 4] [--in-flight 8]

create   h2load, --connections connections with --in-flight calls each, --requests calls of
         createTransaction (lease 600 s, past the run's end) on a 4-segment stream.
ping     --connections x --in-flight h2load processes of one connection and one call in flight
         each, every one pinging its own open transaction (two pings of one transaction at once
         race on its version, which no client does): --requests calls in all.
baseline --connections x --in-flight asyncpg connections, each inserting one row (autocommit)
         back to back for --seconds (bench/txns.py's baseline).

The issue's targets: createTransaction >= 50% and pings >= 60% of the baseline's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import start_served
from bench._common import create_fixed_stream, throwaway_cluster
from bench._h2load import grpc_body, run_h2load
from bench.processes import cpu_s, echo_floors, server_pids
from bench.txns import baseline

INFO = pb.StreamInfo(scope="bench", stream="txns")
SEGMENTS = 4
# The longest lease Pravega allows: the transactions the run opens (thousands) stay open to its
# end, so no lease expiry (and no abort work) lands in a later round.
LEASE_MS = 600_000
CREATE_ANSWER_BYTES = 60  # an id and four segment ranges
PING_ANSWER_BYTES = 5  # a message, even an empty one (OK): an error is trailers only
SIDES = ("echo", "echo 2", "processes 1", "processes 2")


async def create_rate(port: int, body: Path, args: argparse.Namespace) -> float:
    run = await run_h2load(
        f"http://127.0.0.1:{port}/io.pravega.controller.stream.api.grpc.v1.ControllerService/createTransaction",
        body, args.requests, args.in_flight, CREATE_ANSWER_BYTES, connections=args.connections,
    )  # fmt: skip
    return run.rate


async def ping_rate(port: int, bodies: list[Path], args: argparse.Namespace) -> float:
    url = (
        f"http://127.0.0.1:{port}/io.pravega.controller.stream.api.grpc.v1.ControllerService/pingTransaction"
    )
    each = args.requests // len(bodies)
    began = time.monotonic()
    await asyncio.gather(*(run_h2load(url, body, each, 1, PING_ANSWER_BYTES) for body in bodies))
    return each * len(bodies) / (time.monotonic() - began)


async def open_txns(stub: ControllerServiceStub, count: int) -> list[pb.TxnId]:
    replies = await asyncio.gather(
        *(stub.createTransaction(pb.CreateTxnRequest(streamInfo=INFO, lease=LEASE_MS)) for _ in range(count))
    )
    return [reply.txnId for reply in replies]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="the baseline's measured seconds")
    parser.add_argument("--requests", type=int, default=6000, help="calls per part and side")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=8)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is not installed (apt-get install nghttp2-client)")
    callers = args.connections * args.in_flight
    load = Path("/proc/loadavg").read_text().split()[:3]
    rates: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        async with echo_floors() as floors, throwaway_cluster() as cluster:
            url = cluster.url()
            (work / "one").mkdir()
            (work / "two").mkdir()
            one = await start_served(work / "one", "--db-url", url, "--processes", "1")
            two = await start_served(work / "two", "--db-url", url, "--processes", "2")
            try:
                channel = Channel("127.0.0.1", one.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope=INFO.scope))
                await create_fixed_stream(stub, INFO, SEGMENTS)
                create_body = work / "create.bin"
                create_body.write_bytes(
                    grpc_body(pb.CreateTxnRequest(streamInfo=INFO, lease=LEASE_MS).SerializeToString())
                )
                ping_bodies = []
                for i, txn in enumerate(await open_txns(stub, callers)):
                    body = work / f"ping-{i}.bin"
                    request = pb.PingTxnRequest(streamInfo=INFO, txnId=txn, lease=LEASE_MS)
                    body.write_bytes(grpc_body(request.SerializeToString()))
                    ping_bodies.append(body)
                channel.close()
                ports = {
                    **{side: port for side, (port, _) in floors.items()},
                    "processes 1": one.grpc_port, "processes 2": two.grpc_port,
                }  # fmt: skip
                pids = {
                    **{side: echo_pids for side, (_, echo_pids) in floors.items()},
                    "processes 1": [one.process.pid],
                    "processes 2": server_pids(two, work / "two"),
                }
                for round_ in range(args.rounds):
                    base = await baseline(url, callers, args.seconds)
                    rates.setdefault("baseline", []).append(base.throughput)
                    order = SIDES if round_ % 2 == 0 else tuple(reversed(SIDES))
                    for side in order:
                        for part in ("create", "ping"):
                            used = cpu_s(pids[side])
                            if part == "create":
                                rate = await create_rate(ports[side], create_body, args)
                            else:
                                rate = await ping_rate(ports[side], ping_bodies, args)
                            key = f"{part} {side}"
                            rates.setdefault(key, []).append(rate)
                            cpu.setdefault(key, []).append((cpu_s(pids[side]) - used) / args.requests)
                    print(
                        f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items())
                    )
            finally:
                await two.stop()
                await one.stop()
    base_rate = statistics.median(rates["baseline"])
    print(f"\nmedian of {args.rounds} rounds, {callers} callers (load average before: {' '.join(load)})")
    print(f"bare asyncpg insert+commit (baseline)   {base_rate:8,.0f}/s")
    for part, target in (("create", 0.50), ("ping", 0.60)):
        for side in SIDES:
            key = f"{part} {side}"
            rate = statistics.median(rates[key])
            server_us = 1e6 * statistics.median(cpu[key])
            verdict = "" if side.startswith("echo") else (" met" if rate >= target * base_rate else " MISSED")
            share = f"{rate / base_rate:6.1%} of the baseline (target {target:.0%}{verdict})"
            print(f"{key:<28} {rate:8,.0f}/s  {share}, server CPU {server_us:5.0f} us/call")


if __name__ == "__main__":
    asyncio.run(main())
