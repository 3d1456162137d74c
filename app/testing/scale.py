"""Builds the gRPC ScaleRequest message tests and benches send (sealed ids, new key ranges)."""

from __future__ import annotations

from app.api.grpc.proto import controller_pb2 as pb


def scale_request(
    info: pb.StreamInfo, sealed: list[int], ranges: list[tuple[float, float]], timestamp: int = 1_000
) -> pb.ScaleRequest:
    return pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=sealed,
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
        scaleTimestamp=timestamp,
    )
