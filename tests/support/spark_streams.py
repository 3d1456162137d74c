"""What the `pravega` data source's tests do around Spark, alike on `serve` and on Pravega 0.13
standalone: a cluster's controller address, streams made, scaled, truncated and deleted over
gRPC, events written by the real Python client, cuts taken by the stream client, and the checks
on the events Spark read back."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.streamclient import StreamController, StreamCut, StreamSegments, head_cut, tail_cut
from app.testing.scale import scale_request
from tests.support.dataplane import ClientProcess, expected_names


@dataclass(frozen=True)
class Cluster:
    """A controller to test against: `serve` or Pravega standalone."""

    name: str
    port: int

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def options(self, scope: str, stream: str, **more: str) -> dict[str, str]:
        return {"controller": self.controller, "scope": scope, "stream": stream, **more}


class Admin:
    """The gRPC calls a test makes around the data source."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.channel = Channel("127.0.0.1", cluster.port)
        self.stub = ControllerServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    async def create_stream(self, scope: str, stream: str, segments: int) -> pb.StreamInfo:
        await self.stub.createScope(pb.ScopeInfo(scope=scope))
        info = pb.StreamInfo(scope=scope, stream=stream)
        made = await self.stub.createStream(
            pb.StreamConfig(
                streamInfo=info,
                scalingPolicy=pb.ScalingPolicy(
                    scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=segments
                ),
            )
        )
        assert made.status == pb.CreateStreamStatus.SUCCESS, made
        return info

    async def scale(self, info: pb.StreamInfo, sealed: list[int], ranges: list[tuple[float, float]]) -> None:
        started = await self.stub.scale(
            scale_request(info, sealed, ranges, timestamp=int(time.time() * 1000))
        )
        assert started.status == pb.ScaleResponse.STARTED, started
        check = pb.ScaleStatusRequest(streamInfo=info, epoch=started.epoch)
        deadline = time.monotonic() + 60
        while (await self.stub.checkScale(check)).status != pb.ScaleStatusResponse.SUCCESS:
            assert time.monotonic() < deadline, "the scale never completed"
            await asyncio.sleep(0.1)

    async def truncate(self, cut: StreamCut) -> None:
        info = pb.StreamInfo(scope=cut.scope, stream=cut.stream)
        done = await self.stub.truncateStream(pb.StreamCut(streamInfo=info, cut=dict(cut.positions)))
        assert done.status == pb.UpdateStreamStatus.SUCCESS, done
        deadline = time.monotonic() + 60
        while (await self.head(cut.scope, cut.stream)).positions != cut.positions:
            assert time.monotonic() < deadline, "the truncation never showed at the head"
            await asyncio.sleep(0.2)

    async def delete(self, scope: str, stream: str) -> None:
        info = pb.StreamInfo(scope=scope, stream=stream)
        assert (await self.stub.sealStream(info)).status == pb.UpdateStreamStatus.SUCCESS
        assert (await self.stub.deleteStream(info)).status == pb.DeleteStreamStatus.SUCCESS

    async def tail(self, scope: str, stream: str) -> StreamCut:
        return await self._cut(scope, stream, tail_cut)

    async def head(self, scope: str, stream: str) -> StreamCut:
        return await self._cut(scope, stream, head_cut)

    async def _cut(
        self, scope: str, stream: str, which: Callable[[StreamSegments], Awaitable[StreamCut]]
    ) -> StreamCut:
        controller = StreamController(self.cluster.controller)
        segments = StreamSegments(controller, scope, stream)
        try:
            return await which(segments)
        finally:
            await segments.close()
            controller.close()


async def write_events(
    cluster: Cluster,
    work: Path,
    scope: str,
    stream: str,
    *,
    count: int,
    keys: int,
    prefix: str,
    size: int = 64,
) -> None:
    """`count` events by the real client, over `keys` routing keys, acknowledged."""
    writer = await ClientProcess.start(
        "write", work, uri=cluster.uri, scope=scope, stream=stream, count=count, keys=keys, prefix=prefix,
        size=size, progress_every=count,
    )  # fmt: skip
    try:
        assert (await writer.result(timeout_s=120))["written"] == count
    finally:
        await writer.kill()


def event_name(event: bytes) -> str:
    """The identity the writer gave an event: `<prefix><key>:<sequence>`."""
    return event.split(b"|", 1)[0].decode()


def check_exactly_once(names: Iterable[str], expected: set[str]) -> None:
    seen = list(names)
    duplicates = len(seen) - len(set(seen))
    assert duplicates == 0, f"{duplicates} events read more than once"
    missing, extra = expected - set(seen), set(seen) - expected
    assert not missing and not extra, (
        f"{len(missing)} missing (e.g. {sorted(missing)[:3]}), extra {sorted(extra)[:3]}"
    )


def check_segment_order(rows: Iterable[tuple[int, int, str]], prefix_len: int = 1) -> None:
    """Within each segment, by offset, every routing key's sequence numbers rise."""
    by_segment: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for segment_id, offset, name in rows:
        by_segment[segment_id].append((offset, name))
    for segment_id, events in by_segment.items():
        events.sort()
        offsets = [o for o, _ in events]
        assert len(set(offsets)) == len(offsets), f"segment {segment_id} has two events at one offset"
        last: dict[str, tuple[str, int]] = {}
        for _, name in events:
            key, _, seq = name[prefix_len:].partition(":")
            prefix = name[:prefix_len]
            if key in last and last[key][0] == prefix:
                assert int(seq) > last[key][1], f"segment {segment_id}: key {key} out of order at {name}"
            last[key] = (prefix, int(seq))


__all__ = [
    "Admin",
    "Cluster",
    "check_exactly_once",
    "check_segment_order",
    "event_name",
    "expected_names",
    "write_events",
]
