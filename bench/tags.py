"""Tags at scale: creation with the maximum tag set, listStreamsInScopeForTag over a scope of
many tagged streams, and tag-only updates, against a real `pgcontroller serve`.

    .venv/bin/python -m bench.tags [--streams 20000] [--in-flight 16]

Every stream carries its own tag, a tag shared by a tenth of the streams and one shared by all;
a page of listStreamsInScope over the same scope is the baseline the tag pages are compared
with (both answer up to 1,000 names from an index range).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from bench._common import percentile, served_controller

SCOPE = "tags"
MAX_TAGS = [f"{i:03d}" + "x" * 252 for i in range(127)]  # the largest accepted set (127 tags < 256 chars)


def stream_config(name: str, tags: list[str]) -> pb.StreamConfig:
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=SCOPE, stream=name),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
        tags=pb.Tags(tag=tags),
    )


def tags_of(index: int) -> list[str]:
    tags = [f"own-{index}", "all"]
    if index % 10 == 0:
        tags.append("tenth")
    return tags


async def timed(calls: list[Callable[[], Awaitable[object]]], in_flight: int) -> list[float]:
    """Runs the calls `in_flight` at a time; the latency of each, in ms."""
    latencies: list[float] = []
    queue = list(reversed(calls))

    async def worker() -> None:
        while queue:
            call = queue.pop()
            began = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - began) * 1000)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies


async def list_all(
    page: Callable[[str], Awaitable[tuple[list[str], str]]],
) -> tuple[list[str], list[float]]:
    """Pages until the empty page; the names and each page's latency (ms)."""
    names: list[str] = []
    latencies: list[float] = []
    token = ""
    while True:
        began = time.perf_counter()
        got, token = await page(token)
        latencies.append((time.perf_counter() - began) * 1000)
        if not got:
            return names, latencies
        names.extend(got)


def line(label: str, latencies: list[float]) -> str:
    return (
        f"{label:<48} p50 {percentile(latencies, 0.5):7.2f} ms  p99 {percentile(latencies, 0.99):7.2f} ms"
        f"  (n={len(latencies)})"
    )


async def run(streams: int, in_flight: int) -> None:
    async with served_controller(SCOPE) as (_url, stub):
        began = time.perf_counter()
        plain = await timed(
            [(lambda i=i: create(stub, stream_config(f"s{i:06d}", tags_of(i)))) for i in range(streams)],
            in_flight,
        )
        created_s = time.perf_counter() - began
        print(f"created {streams} streams with 2-3 tags in {created_s:.1f} s ({streams / created_s:.0f}/s)")
        print(line("createStream, 2-3 tags", plain))
        heavy_configs = [stream_config(f"max{i:04d}", MAX_TAGS) for i in range(200)]
        heavy = await timed([(lambda c=c: create(stub, c)) for c in heavy_configs], in_flight)
        print(line("createStream, 127 tags of 255 chars", heavy))
        print(f"  ratio p50 (127 tags / 2-3 tags): {percentile(heavy, 0.5) / percentile(plain, 0.5):.2f}")

        async def stream_page(token: str) -> tuple[list[str], str]:
            answer = await stub.listStreamsInScope(
                pb.StreamsInScopeRequest(
                    scope=pb.ScopeInfo(scope=SCOPE), continuationToken=pb.ContinuationToken(token=token)
                )
            )
            return [s.stream for s in answer.streams], answer.continuationToken.token

        def tag_page(tag: str) -> Callable[[str], Awaitable[tuple[list[str], str]]]:
            async def page(token: str) -> tuple[list[str], str]:
                answer = await stub.listStreamsInScopeForTag(
                    pb.StreamsInScopeWithTagRequest(
                        scope=pb.ScopeInfo(scope=SCOPE),
                        tag=tag,
                        continuationToken=pb.ContinuationToken(token=token),
                    )
                )
                return [s.stream for s in answer.streams], answer.continuationToken.token

            return page

        baseline_names, baseline = await list_all(stream_page)
        print(line(f"baseline: listStreamsInScope ({len(baseline_names)} names)", baseline))
        for tag, expected in (("all", streams), ("tenth", (streams + 9) // 10), (f"own-{streams // 2}", 1)):
            names, pages = await list_all(tag_page(tag))
            assert len(names) == len(set(names)) == expected, (tag, len(names), expected)
            print(line(f"listStreamsInScopeForTag '{tag}' ({expected} names)", pages))
            ratio = percentile(pages, 0.5) / percentile(baseline, 0.5)
            print(f"  ratio p50 (tag page / baseline page): {ratio:.2f}")

        replaced = [t[:-1] + "y" for t in MAX_TAGS[:-1]]
        retagged = [stream_config(f"max{i:04d}", replaced) for i in range(200)]
        updates = await timed([(lambda c=c: update(stub, c)) for c in retagged], in_flight)
        print(line("updateStream, tag-only, 127 tags replaced", updates))
        names, _ = await list_all(tag_page(MAX_TAGS[0][:-1] + "y"))
        assert len(names) == 200, len(names)
        names, _ = await list_all(tag_page(MAX_TAGS[-1]))
        assert names == [], names[:3]


async def create(stub: ControllerServiceStub, config: pb.StreamConfig) -> None:
    status = await stub.createStream(config)
    assert status.status == pb.CreateStreamStatus.SUCCESS, (config.streamInfo.stream, status)


async def update(stub: ControllerServiceStub, config: pb.StreamConfig) -> None:
    status = await stub.updateStream(config)
    assert status.status == pb.UpdateStreamStatus.SUCCESS, (config.streamInfo.stream, status)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(run(args.streams, args.in_flight))


if __name__ == "__main__":
    main()
