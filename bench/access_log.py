"""The cost of the access log per RPC: getCurrentSegments on one served controller, in alternating
rounds with the `pgcontroller.access` lines written (JSON, to /dev/null) and silenced (request ids
still made and carried, as with `--no-access-log`).

    .venv/bin/python bench/access_log.py [--calls 2000] [--concurrency 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.observability.logs import ACCESS_LOGGER, configure
from app.testing.controller import running_controller, serving
from bench._common import throwaway_database

STREAM = pb.StreamInfo(scope="bench", stream="s", accessOperation=pb.StreamInfo.AccessOperation.NONE)


async def _rate(stub: ControllerServiceStub, calls: int, concurrency: int) -> float:
    async def worker() -> None:
        for _ in range(calls // concurrency):
            await stub.getCurrentSegments(STREAM)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (calls // concurrency * concurrency) / (time.perf_counter() - started)


async def main(calls: int, concurrency: int, rounds: int) -> None:
    with open(os.devnull, "w") as sink:  # noqa: ASYNC230 - /dev/null
        configure("INFO", "json", stream=sink, force=True)
        access = logging.getLogger(ACCESS_LOGGER)
        async with throwaway_database() as url, running_controller(url) as services:
            await services.scopes.create_scope("bench")
            async with serving(services) as served:
                channel = Channel("127.0.0.1", served.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createStream(
                    pb.StreamConfig(streamInfo=STREAM, scalingPolicy=pb.ScalingPolicy(minNumSegments=4))
                )
                await _rate(stub, 400, concurrency)  # warm up
                on, off = [], []
                sides = [(on, logging.NOTSET), (off, logging.WARNING)]
                for round_number in range(rounds):
                    # Each side goes first in every other round: what a round's start costs
                    # (a collection, a warm cache) falls on both alike.
                    for rates, level in sides if round_number % 2 == 0 else sides[::-1]:
                        access.setLevel(level)
                        rates.append(await _rate(stub, calls, concurrency))
                channel.close()
    on_rate, off_rate = statistics.median(on), statistics.median(off)
    print(f"getCurrentSegments, {calls} calls x {rounds} rounds, concurrency {concurrency}, one process")
    print(f"  access log silenced: {off_rate:8.0f} calls/s")
    print(f"  access log written : {on_rate:8.0f} calls/s   ({(1 - on_rate / off_rate) * 100:+.1f}% loss)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.concurrency, args.rounds))
