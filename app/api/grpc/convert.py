"""Protobuf <-> domain conversions for the controller wire contract."""

from __future__ import annotations

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.errors import InvalidInput
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
)


def stream_config_from_proto(msg: pb.StreamConfig) -> StreamConfig:
    try:
        scale_type = ScaleType(msg.scalingPolicy.scaleType)
    except ValueError as exc:
        raise InvalidInput(f"unknown scaling policy type {msg.scalingPolicy.scaleType}") from exc
    retention = None
    # UNKNOWN (0) on the wire means "no retention policy": proto3 cannot tell unset from 0.
    if msg.HasField("retentionPolicy") and msg.retentionPolicy.retentionType != 0:
        try:
            retention_type = RetentionType(msg.retentionPolicy.retentionType)
        except ValueError as exc:
            raise InvalidInput(f"unknown retention type {msg.retentionPolicy.retentionType}") from exc
        retention = RetentionPolicy(
            retention_type, msg.retentionPolicy.retentionParam, msg.retentionPolicy.retentionMax
        )
    config = StreamConfig(
        scaling=ScalingPolicy(
            scale_type,
            msg.scalingPolicy.targetRate,
            msg.scalingPolicy.scaleFactor,
            msg.scalingPolicy.minNumSegments,
        ),
        retention=retention,
        tags=tuple(msg.tags.tag),
        timestamp_aggregation_timeout=msg.timestampAggregationTimeout,
        rollover_size_bytes=msg.rolloverSizeBytes,
    )
    # Tag limits apply to the request as sent (a repeated tag still counts against the limit).
    if len(msg.tags.tag) > 127:
        raise InvalidInput(f"a stream may carry at most 127 tags, got {len(msg.tags.tag)}")
    return config


def stream_config_to_proto(scope: str, stream: str, config: StreamConfig) -> pb.StreamConfig:
    msg = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(
            scaleType=int(config.scaling.scale_type),  # type: ignore[arg-type]
            targetRate=config.scaling.target_rate,
            scaleFactor=config.scaling.scale_factor,
            minNumSegments=config.scaling.min_num_segments,
        ),
        tags=pb.Tags(tag=list(config.tags)),
        timestampAggregationTimeout=config.timestamp_aggregation_timeout,
        rolloverSizeBytes=config.rollover_size_bytes,
    )
    if config.retention is not None:
        msg.retentionPolicy.CopyFrom(
            pb.RetentionPolicy(
                retentionType=int(config.retention.retention_type),  # type: ignore[arg-type]
                retentionParam=config.retention.retention_param,
                retentionMax=config.retention.retention_max,
            )
        )
    return msg


def segment_range(scope: str, stream: str, segment: SegmentRecord) -> pb.SegmentRange:
    return pb.SegmentRange(
        segmentId=pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=segment.id),
        minKey=segment.key_start,
        maxKey=segment.key_end,
    )
