"""Auto-scaling under the real client's load, shared by the end-to-end test and the bench: the
`serve` flags that make a segment store's auto-scaler judge within seconds, a stream with a rate
policy, and a wait on the stream's current segments.

The flags keep every rule (Pravega's averages, cooldown, mute, idle expiry) and only shorten its
durations: the time scale turns the 2/5/10/20-minute averages into 1.2/3/6/12 seconds and the
2-minute reporting interval into 1.2 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub

# Mute 2 s: a segment created by a split is muted for that long, so a load stopped within it
# cannot split the new segments again; idle 3 s: then each sends its silent DOWN.
FAST_AUTOSCALE_FLAGS = (
    "--autoscale-cooldown-s", "0",
    "--autoscale-mute-s", "2",
    "--autoscale-cache-expiry-s", "3",
    "--autoscale-cache-cleanup-s", "0.2",
    "--autoscale-time-scale", "0.01",
)  # fmt: skip

Segments = list[tuple[int, float, float]]


async def create_rate_stream(
    stub: ControllerServiceStub,
    scope: str,
    stream: str,
    *,
    scale_type: int = pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
    target_rate: int,
    scale_factor: int = 2,
    min_segments: int = 1,
) -> pb.StreamInfo:
    await stub.createScope(pb.ScopeInfo(scope=scope))
    info = pb.StreamInfo(scope=scope, stream=stream)
    policy = pb.ScalingPolicy(
        scaleType=scale_type,  # type: ignore[arg-type]
        targetRate=target_rate,
        scaleFactor=scale_factor,
        minNumSegments=min_segments,
    )
    status = await stub.createStream(pb.StreamConfig(streamInfo=info, scalingPolicy=policy))
    assert status.status == pb.CreateStreamStatus.SUCCESS, status
    return info


async def current(stub: ControllerServiceStub, info: pb.StreamInfo) -> Segments:
    ranges = (await stub.getCurrentSegments(info)).segmentRanges
    return sorted((r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges)


async def wait_for_segments(
    stub: ControllerServiceStub,
    info: pb.StreamInfo,
    ready: Callable[[Segments], bool],
    timeout_s: float,
    what: str,
) -> tuple[Segments, float]:
    """The current segments once `ready` holds, and when (time.monotonic()) that was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        segments = await current(stub, info)
        if ready(segments):
            return segments, time.monotonic()
        assert time.monotonic() < deadline, f"{what}: still {segments} after {timeout_s} s"
        await asyncio.sleep(0.05)


def epoch_of(segment_id: int) -> int:
    return segment_id >> 32
