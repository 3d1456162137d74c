"""Manual scale, end to end, through gRPC against a real `pgcontroller serve` subprocess on a
throwaway embedded PostgreSQL.

    .venv/bin/python bench/scale.py [--latency-scales 200] [--consecutive 1010] [--streams 200]
        [--rounds 3] [--poll-ms 2] [--fleet-poll-ms 20] [--fleet-poll-max-ms 500] [--skip a,b,c]

(a) latency of one scale of a 10-segment stream: from sending `scale` until
    getCurrentSegments returns the new segment set (polled every --poll-ms), and until
    checkScale says SUCCESS (the stream is ACTIVE again, so the next scale may start);
(b) total time of --consecutive scales of one stream, each waiting for checkScale SUCCESS;
(c) throughput: --streams streams, each scaled --rounds times one after the other, all
    streams at once: scales/s until every checkScale said SUCCESS, and until every new epoch
    was current in the database (a watcher on its own connection, no load on the server).
    Polls back off (x1.5 per poll), as a client waiting on many scales would: polling 200
    streams every 20 ms is 10,000 checkScale/s, which would starve the scale workers that
    share the process.

Every scale seals two adjacent segments [a, x) [x, b) and creates [a, m) [m, b) with
m = (a + b) / 2 in exact doubles, so the stream keeps 10 segments and the ranges never
degenerate. A poll interval of 0 polls back to back; the polls then compete with the scale
workflow for the server's one event loop and lengthen it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import start_served
from bench._common import create_fixed_stream, percentile, throwaway_database

SCOPE = "bench"
SEGMENTS = 10
SCALE_TIMEOUT_S = 60.0
STARTED = pb.ScaleResponse.STARTED
SUCCESS = pb.ScaleStatusResponse.SUCCESS

Segments = dict[int, tuple[float, float]]  # id -> [start, end)


@dataclass
class Timing:
    submit_ms: float  # the scale RPC alone
    current_ms: float  # until getCurrentSegments shows the new set (nan when not polled)
    done_ms: float  # until checkScale SUCCESS
    polls: int


@dataclass
class Failures:
    rejected: list[str] = field(default_factory=list)  # scale answers other than STARTED, retried


class Backoff:
    def __init__(self, first_s: float, max_s: float) -> None:
        self._next = first_s
        self._max = max(first_s, max_s)

    async def sleep(self) -> None:
        if self._next > 0:
            await asyncio.sleep(self._next)
            self._next = min(self._max, self._next * 1.5)


def info_of(stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=SCOPE, stream=stream)


async def create_stream(stub: ControllerServiceStub, stream: str) -> Segments:
    await create_fixed_stream(stub, info_of(stream), SEGMENTS)
    return await current(stub, stream)


async def current(stub: ControllerServiceStub, stream: str) -> Segments:
    reply = await stub.getCurrentSegments(info_of(stream))
    return {r.segmentId.segmentId: (r.minKey, r.maxKey) for r in reply.segmentRanges}


def plan(segments: Segments, rng: random.Random) -> tuple[list[int], list[tuple[float, float]]]:
    """Two adjacent segments to seal and the two ranges replacing them."""
    ordered = sorted(segments.items(), key=lambda item: item[1][0])
    i = rng.randrange(len(ordered) - 1)
    (left, (a, x)), (right, (y, b)) = ordered[i], ordered[i + 1]
    assert x == y, "current segments must tile the key space"
    m = (a + b) / 2
    assert a < m < b
    return [left, right], [(a, m), (m, b)]


async def scale_once(
    stub: ControllerServiceStub,
    stream: str,
    segments: Segments,
    rng: random.Random,
    failures: Failures,
    *,
    watch_current: bool,
    poll_s: float,
    poll_max_s: float | None = None,
) -> tuple[Segments, Timing]:
    """Submits one scale, waits for it to complete; returns the new segments and the timing.
    Polls `poll_s` apart, growing by half each time up to `poll_max_s` (default: constant)."""
    info = info_of(stream)
    loop = asyncio.get_running_loop()
    while True:
        sealed, ranges = plan(segments, rng)
        request = pb.ScaleRequest(
            streamInfo=info,
            sealedSegments=sealed,
            newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=s, end=e) for s, e in ranges],
            scaleTimestamp=int(time.time() * 1000),
        )
        began = loop.time()
        reply = await stub.scale(request)
        submitted = loop.time()
        if reply.status == STARTED:
            break
        # Never expected when each scale waits for the previous one; counted and retried.
        failures.rejected.append(f"{stream}: {pb.ScaleResponse.ScaleStreamStatus.Name(reply.status)}")
        await asyncio.sleep(0.01)
        segments = await current(stub, stream)
    expected = {k: v for k, v in segments.items() if k not in sealed}
    expected.update({r.segmentId.segmentId: (r.minKey, r.maxKey) for r in reply.segments})
    deadline = began + SCALE_TIMEOUT_S
    polls = 0
    pause = Backoff(poll_s, poll_s if poll_max_s is None else poll_max_s)
    current_at = float("nan")
    if watch_current:
        while True:
            polls += 1
            if await current(stub, stream) == expected:
                current_at = loop.time()
                break
            if loop.time() > deadline:
                raise TimeoutError(f"{stream}: new segments not current after {SCALE_TIMEOUT_S}s")
            await pause.sleep()
    check = pb.ScaleStatusRequest(streamInfo=info, epoch=reply.epoch)
    while True:
        polls += 1
        status = await stub.checkScale(check)
        if status.status == SUCCESS:
            break
        if status.status != pb.ScaleStatusResponse.IN_PROGRESS:
            raise RuntimeError(
                f"{stream}: checkScale {pb.ScaleStatusResponse.ScaleStatus.Name(status.status)}"
            )
        if loop.time() > deadline:
            raise TimeoutError(f"{stream}: scale not done after {SCALE_TIMEOUT_S}s")
        await pause.sleep()
    done = loop.time()
    ms = 1000.0
    return expected, Timing((submitted - began) * ms, (current_at - began) * ms, (done - began) * ms, polls)


def summary(label: str, values: list[float]) -> str:
    return (
        f"{label:<38} p50 {percentile(values, 0.50):7.1f} ms  p99 {percentile(values, 0.99):7.1f} ms  "
        f"max {max(values):7.1f} ms  (n={len(values)})"
    )


def verdict(ok: bool, target: str) -> str:
    return f"target {target}: {'met' if ok else 'MISSED'}"


async def latency(stub: ControllerServiceStub, count: int, poll_s: float, failures: Failures) -> list[Timing]:
    rng = random.Random(1)
    segments = await create_stream(stub, "latency")
    timings = []
    for _ in range(count):
        segments, timing = await scale_once(
            stub, "latency", segments, rng, failures, watch_current=True, poll_s=poll_s
        )
        timings.append(timing)
    assert await current(stub, "latency") == segments
    return timings


async def consecutive(
    stub: ControllerServiceStub, count: int, poll_s: float, failures: Failures
) -> tuple[float, list[Timing]]:
    rng = random.Random(2)
    segments = await create_stream(stub, "consecutive")
    timings = []
    began = time.perf_counter()
    for _ in range(count):
        segments, timing = await scale_once(
            stub, "consecutive", segments, rng, failures, watch_current=False, poll_s=poll_s
        )
        timings.append(timing)
    total = time.perf_counter() - began
    assert await current(stub, "consecutive") == segments
    return total, timings


@dataclass
class FleetResult:
    create_s: float  # creating the streams
    clients_s: float  # first scale sent .. last checkScale SUCCESS seen
    server_s: float  # first scale sent .. every new epoch current in the database
    timings: list[Timing]


async def epochs_reached(url: str, prefix: str, total: int, began: float) -> float:
    """Seconds after `began` (perf_counter) at which the fleet's epochs add up to `total`; one
    cheap query every 10 ms on its own connection, so the server does no extra work."""
    conn = await asyncpg.connect(url)
    try:
        while True:
            reached = await conn.fetchval(
                "SELECT coalesce(sum(ce.epoch), 0) FROM streams s"
                " JOIN stream_current_epochs ce ON ce.stream_id = s.id"
                " WHERE s.scope = $1 AND s.name LIKE $2",
                SCOPE,
                prefix + "%",
            )
            if reached >= total:
                return time.perf_counter() - began
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


async def fleet(
    stubs: list[ControllerServiceStub],
    url: str,
    streams: int,
    rounds: int,
    poll: tuple[float, float],
    failures: Failures,
) -> FleetResult:
    prefix = "fleet-"
    names = [f"{prefix}{i:04d}" for i in range(streams)]
    gate = asyncio.Semaphore(32)

    async def create(i: int, name: str) -> Segments:
        async with gate:
            return await create_stream(stubs[i % len(stubs)], name)

    began = time.perf_counter()
    initial = await asyncio.gather(*(create(i, n) for i, n in enumerate(names)))
    created = time.perf_counter() - began
    timings: list[Timing] = []

    async def run(i: int, name: str, segments: Segments) -> None:
        stub = stubs[i % len(stubs)]
        rng = random.Random(100 + i)
        for _ in range(rounds):
            segments, timing = await scale_once(
                stub, name, segments, rng, failures, watch_current=False, poll_s=poll[0], poll_max_s=poll[1]
            )
            timings.append(timing)

    began = time.perf_counter()
    watcher = asyncio.create_task(epochs_reached(url, prefix, streams * rounds, began))
    await asyncio.gather(*(run(i, n, s) for i, (n, s) in enumerate(zip(names, initial, strict=True))))
    clients = time.perf_counter() - began
    server = await asyncio.wait_for(watcher, SCALE_TIMEOUT_S)
    return FleetResult(created, clients, server, timings)


async def run_parts(
    stubs: list[ControllerServiceStub], url: str, args: argparse.Namespace, failures: Failures
) -> None:
    skip = set(filter(None, args.skip.split(",")))
    poll_s = args.poll_ms / 1000
    if "a" not in skip:
        timings = await latency(stubs[0], args.latency_scales, poll_s, failures)
        new_current = [t.current_ms for t in timings]
        print(f"(a) one scale of a {SEGMENTS}-segment stream; {len(timings)} scales, one after another")
        print("    " + summary("scale RPC (STARTED)", [t.submit_ms for t in timings]))
        print("    " + summary("until new segments are current", new_current))
        print("    " + summary("until checkScale SUCCESS", [t.done_ms for t in timings]))
        print(f"    polls per scale: {sum(t.polls for t in timings) / len(timings):.1f}")
        p50, p99 = percentile(new_current, 0.50), percentile(new_current, 0.99)
        print("    " + verdict(p50 < 50 and p99 < 250, "p50 < 50 ms, p99 < 250 ms (new segments current)"))
    if "b" not in skip:
        total, timings = await consecutive(stubs[0], args.consecutive, poll_s, failures)
        print(f"(b) {len(timings)} consecutive scales of one stream")
        print(f"    total {total:.1f} s, {len(timings) / total:.1f} scales/s")
        print("    " + summary("each, until checkScale SUCCESS", [t.done_ms for t in timings]))
        print("    " + verdict(total < 60, "< 60 s"))
    if "c" not in skip:
        poll = (args.fleet_poll_ms / 1000, args.fleet_poll_max_ms / 1000)
        result = await fleet(stubs, url, args.streams, args.rounds, poll, failures)
        count = len(result.timings)
        rate = count / result.clients_s
        print(
            f"(c) {args.streams} streams x {args.rounds} scales each (in sequence per stream), all streams "
            f"at once; {len(stubs)} gRPC connections; checkScale polled from {args.fleet_poll_ms:g} ms "
            f"growing to {args.fleet_poll_max_ms:g} ms"
        )
        print(f"    created {args.streams} streams in {result.create_s:.1f} s")
        print(f"    {count} scales, all checkScale SUCCESS in {result.clients_s:.1f} s: {rate:.1f} scales/s")
        print(
            f"    all new epochs current in the database after {result.server_s:.1f} s: "
            f"{count / result.server_s:.1f} scales/s"
        )
        print("    " + summary("each, until checkScale SUCCESS", [t.done_ms for t in result.timings]))
        print("    " + verdict(rate >= 50, ">= 50 scales/s (checkScale SUCCESS)"))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-scales", type=int, default=200, help="(a) scales timed one by one")
    parser.add_argument("--consecutive", type=int, default=1010, help="(b) scales of one stream")
    parser.add_argument("--streams", type=int, default=200, help="(c) streams scaled at once")
    parser.add_argument("--rounds", type=int, default=3, help="(c) scales of each stream, in sequence")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="(a), (b): pause between polls (0: none)")
    parser.add_argument("--fleet-poll-ms", type=float, default=20.0, help="(c): first pause between polls")
    parser.add_argument("--fleet-poll-max-ms", type=float, default=500.0, help="(c): longest pause")
    parser.add_argument("--channels", type=int, default=4, help="(c): gRPC connections shared by streams")
    parser.add_argument("--request-concurrency", type=int, default=None, help="passed to serve")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: a,b,c")
    args = parser.parse_args()
    failures = Failures()
    extra = (
        [] if args.request_concurrency is None else ["--request-concurrency", str(args.request_concurrency)]
    )

    async with throwaway_database() as url:
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", url, *extra)
            channels = [Channel("127.0.0.1", served.grpc_port) for _ in range(max(1, args.channels))]
            try:
                stubs = [ControllerServiceStub(c) for c in channels]
                await stubs[0].createScope(pb.ScopeInfo(scope=SCOPE))
                await run_parts(stubs, url, args, failures)
            finally:
                for channel in channels:
                    channel.close()
                await served.stop()
    print(f"scale requests answered other than STARTED (retried): {len(failures.rejected)}")
    for line in failures.rejected[:10]:
        print(f"    {line}")


if __name__ == "__main__":
    asyncio.run(main())
