"""getCurrentSegments and getURI throughput/latency with 32 in flight, against a bare grpclib
echo of the same contract measured in the same run.

    .venv/bin/python bench/reads.py [--seconds 10] [--in-flight 32]

The controller runs as a real `pgcontroller serve` subprocess on an embedded PostgreSQL; the
load generator is this process, so client cost is the same for both servers.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.ports import free_port
from app.testing.served import start_served
from bench._common import LoadResult, closed_loop, throwaway_database


async def measure(port: int, label: str, seconds: float, in_flight: int) -> list[LoadResult]:
    channel = Channel("127.0.0.1", port)
    stub = ControllerServiceStub(channel)
    info = pb.StreamInfo(scope="bench", stream="s")
    uri_request = pb.SegmentId(streamInfo=info, segmentId=7)
    try:
        segments = await closed_loop(
            f"{label} getCurrentSegments", lambda: stub.getCurrentSegments(info), in_flight, seconds
        )
        uri = await closed_loop(f"{label} getURI", lambda: stub.getURI(uri_request), in_flight, seconds)
    finally:
        channel.close()
    return [segments, uri]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--in-flight", type=int, default=32)
    args = parser.parse_args()

    echo_port = free_port()
    echo = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("_echo_server.py")),
        str(echo_port),
        stdout=asyncio.subprocess.PIPE,
        cwd=str(Path(__file__).resolve().parents[1]),
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert echo.stdout is not None
    await echo.stdout.readline()

    async with throwaway_database() as url:
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", url)
            try:
                channel = Channel("127.0.0.1", served.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope="bench"))
                await stub.createStream(
                    pb.StreamConfig(
                        streamInfo=pb.StreamInfo(scope="bench", stream="s"),
                        scalingPolicy=pb.ScalingPolicy(minNumSegments=10),
                    )
                )
                channel.close()
                ours = await measure(served.grpc_port, "pgcontroller", args.seconds, args.in_flight)
                bare = await measure(echo_port, "bare grpclib echo", args.seconds, args.in_flight)
            finally:
                await served.stop()
                echo.terminate()
                await echo.wait()

    print(f"in flight: {args.in_flight}, measured seconds per run: {args.seconds}")
    for result in (*ours, *bare):
        print(result.line())
    for mine, base in zip(ours, bare, strict=True):
        share = mine.throughput / base.throughput
        print(f"ratio {mine.name.split()[-1]:<20} {share:6.1%} of the bare echo's throughput")


if __name__ == "__main__":
    asyncio.run(main())
