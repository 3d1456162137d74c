"""Creating the largest allowed stream (MAX_SEGMENTS_PER_EPOCH segments) through the real gRPC
and REST servers, in-process, with a ticker on the same event loop measuring how late it wakes:
the creation's wall time and the loop's worst lateness, next to a bare baseline (the same segment
rows written by one plain multi-row INSERT, nothing else).

    .venv/bin/python bench/large_streams.py [--segments 10000] [--rounds 3] [--no-scales]

The scales (every segment of the largest stream replaced; one segment split into the largest
count) are timed until checkScale says SUCCESS, polled every 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.limits import MAX_SEGMENTS_PER_EPOCH
from app.services.health import HealthService
from app.testing.clock import ManualClock
from app.testing.controller import TEST_SETTINGS, running_controller
from app.testing.loop_ticker import LoopTicker
from app.wiring.servers import start_servers
from bench._common import throwaway_database

SCOPE = "bench"


async def _baseline(url: str, segments: int) -> float:
    """One multi-row INSERT of the segment rows of a fresh stream: the floor of the database's work."""
    conn = await asyncpg.connect(url)
    try:
        stream_id = await conn.fetchval(
            "INSERT INTO streams (scope, name, creation_time) VALUES ($1, $2, 0) RETURNING id",
            SCOPE,
            f"baseline-{time.monotonic_ns()}",
        )
        values = ",".join(
            f"({stream_id}, {i}, {i}, 0, 0, {i / segments!r}, {(i + 1) / segments!r})"
            for i in range(segments)
        )
        started = time.perf_counter()
        await conn.execute(
            "INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, "
            f"key_start, key_end) VALUES {values}"
        )
        return time.perf_counter() - started
    finally:
        await conn.close()


async def _scale(
    stub: ControllerServiceStub, stream: str, what: str, sealed: int, ranges: list[tuple[float, float]]
) -> tuple[str, float, float, float]:
    """A scale sealing segments 0..sealed-1 into `ranges`, timed until checkScale says SUCCESS."""
    info = pb.StreamInfo(scope=SCOPE, stream=stream)
    async with LoopTicker() as ticker:
        started = time.perf_counter()
        response = await stub.scale(
            pb.ScaleRequest(
                streamInfo=info,
                sealedSegments=list(range(sealed)),
                newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
                scaleTimestamp=int(time.time() * 1000),
            ),
            timeout=300,
        )
        assert response.status == pb.ScaleResponse.STARTED, response
        while True:
            check = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=0), timeout=60)
            if check.status == pb.ScaleStatusResponse.SUCCESS:
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
    return f"scale: {what}", elapsed, ticker.max_late_s, ticker.max_held_s


async def main(segments: int, rounds: int, scales: bool) -> None:
    async with throwaway_database() as url, running_controller(url) as services:
        settings = replace(TEST_SETTINGS, grpc_port=0, rest_port=0)
        servers = await start_servers(settings, services.controller, HealthService(ManualClock(0)))
        channel = Channel("127.0.0.1", servers.grpc_port)
        stub = ControllerServiceStub(channel)
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        rows: list[tuple[str, float, float, float]] = []
        try:
            async with aiohttp.ClientSession() as http:
                for n in range(rounds):
                    async with LoopTicker() as ticker:
                        started = time.perf_counter()
                        status = await stub.createStream(
                            pb.StreamConfig(
                                streamInfo=pb.StreamInfo(scope=SCOPE, stream=f"grpc{n}"),
                                scalingPolicy=pb.ScalingPolicy(minNumSegments=segments),
                            ),
                            timeout=300,
                        )
                        elapsed = time.perf_counter() - started
                    assert status.status == pb.CreateStreamStatus.SUCCESS, status
                    rows.append(("gRPC createStream", elapsed, ticker.max_late_s, ticker.max_held_s))
                    async with LoopTicker() as ticker:
                        started = time.perf_counter()
                        async with http.post(
                            f"http://127.0.0.1:{servers.rest_port}/v1/scopes/{SCOPE}/streams",
                            json={
                                "streamName": f"rest{n}",
                                "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": segments},
                            },
                        ) as response:
                            assert response.status == 201, await response.text()
                        elapsed = time.perf_counter() - started
                    rows.append(("REST POST streams", elapsed, ticker.max_late_s, ticker.max_held_s))
                    rows.append(("baseline: one multi-row INSERT", await _baseline(url, segments), 0.0, 0.0))
                    if not scales:
                        continue
                    ranges = [(i / segments, (i + 1) / segments) for i in range(segments)]
                    # A fixed stream keeps its minimum: replacing every segment is the largest scale.
                    rows.append(await _scale(stub, f"grpc{n}", f"replace all {segments}", segments, ranges))
                    one = f"one{n}"
                    await stub.createStream(
                        pb.StreamConfig(
                            streamInfo=pb.StreamInfo(scope=SCOPE, stream=one),
                            scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
                        )
                    )
                    rows.append(await _scale(stub, one, f"split 1 into {segments}", 1, ranges))
        finally:
            channel.close()
            await servers.close(5)
    print(f"{segments} segments, {rounds} rounds (median; worst loop lateness over all rounds)")
    for what in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == what]
        median = statistics.median(row[1] for row in mine)
        late = max(row[2] for row in mine)
        held = max(row[3] for row in mine)
        print(
            f"  {what:34s} {median * 1000:9.0f} ms   loop max late {late * 1000:7.1f} ms"
            f"   held (CPU) {held * 1000:7.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=MAX_SEGMENTS_PER_EPOCH)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-scales", action="store_true", help="creation only (the scales take minutes)")
    args = parser.parse_args()
    asyncio.run(main(args.segments, args.rounds, not args.no_scales))
