"""Protobuf <-> domain conversions for the controller wire contract."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from typing import Any, TypeVar

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.errors import InvalidInput
from app.domain.limits import SEGMENTS_PER_BATCH
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
)
from app.domain.txns import CompletedTxn, Outcome, PingStatus, TxnId, TxnStatus

_Outcome = TypeVar("_Outcome", bound=enum.Enum)
_Status = TypeVar("_Status", bound=int)


def statuses_by_name(
    outcomes: type[_Outcome], statuses: type[_Status], **renamed: str
) -> dict[_Outcome, _Status]:
    """Each outcome's status in the contract: the one of its name, or of the name `renamed` gives
    it (our outcome enums are named after Pravega's statuses). An outcome the contract has no
    status for fails at import, not at its first answer."""
    return {outcome: getattr(statuses, renamed.get(outcome.name, outcome.name)) for outcome in outcomes}


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


async def add_segment_ranges(target: Any, scope: str, stream: str, segments: Sequence[SegmentRecord]) -> None:
    """Appends the ranges of `segments` to the repeated field `target`, a batch at a time with the
    event loop served in between: an epoch of 10,000 segments is most of 100 ms of message
    building. Appending to the field itself spares the copy a constructor argument costs."""
    info = pb.StreamInfo(scope=scope, stream=stream)
    for start in range(0, len(segments), SEGMENTS_PER_BATCH):
        if start:
            await asyncio.sleep(0)
        for segment in segments[start : start + SEGMENTS_PER_BATCH]:
            added = target.add(minKey=segment.key_start, maxKey=segment.key_end)
            added.segmentId.streamInfo.CopyFrom(info)
            added.segmentId.segmentId = segment.id


def segment_range(scope: str, stream: str, segment: SegmentRecord) -> pb.SegmentRange:
    return pb.SegmentRange(
        segmentId=pb.SegmentId(streamInfo=pb.StreamInfo(scope=scope, stream=stream), segmentId=segment.id),
        minKey=segment.key_start,
        maxKey=segment.key_end,
    )


# --- transactions ---------------------------------------------------------------------

_PING_STATUS = statuses_by_name(PingStatus, pb.PingTxnStatus.Status)
_TXN_STATE = statuses_by_name(TxnStatus, pb.TxnState.State)
_OUTCOME = statuses_by_name(Outcome, pb.TxnStatus.Status)
_COMPLETED = {
    TxnStatus.COMMITTED: pb.TxnResponse.COMMITTED,
    TxnStatus.ABORTED: pb.TxnResponse.ABORTED,
}


def txn_id_to_proto(txn: TxnId) -> pb.TxnId:
    return pb.TxnId(highBits=txn.high, lowBits=txn.low)


def txn_id_from_proto(msg: pb.TxnId) -> TxnId:
    # An absent txnId reads as (0, 0): an id no transaction has, so it answers UNKNOWN/FAILURE.
    return TxnId(msg.highBits, msg.lowBits)


def ping_status_to_proto(status: PingStatus) -> pb.PingTxnStatus:
    return pb.PingTxnStatus(status=_PING_STATUS[status])


def txn_state_to_proto(status: TxnStatus) -> pb.TxnState:
    return pb.TxnState(state=_TXN_STATE[status])


def outcome_to_proto(outcome: Outcome) -> pb.TxnStatus:
    return pb.TxnStatus(status=_OUTCOME[outcome])


def completed_txns_to_proto(completed: Sequence[CompletedTxn]) -> pb.ListCompletedTxnResponse:
    return pb.ListCompletedTxnResponse(
        response=[
            pb.TxnResponse(txnId=txn_id_to_proto(c.txn), status=_COMPLETED[c.status]) for c in completed
        ]
    )
