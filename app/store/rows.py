"""Mapping between table rows and domain records, kept apart from the SQL that reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.domain.ids import epoch_of, number_of
from app.domain.records import (
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
    TruncationRecord,
)
from app.store.db import Row


def config_columns(config: StreamConfig) -> tuple[Any, ...]:
    """Column values in the order of stream_configs' insert and set_config parameters."""
    retention = config.retention
    return (
        int(config.scaling.scale_type),
        config.scaling.target_rate,
        config.scaling.scale_factor,
        config.scaling.min_num_segments,
        None if retention is None else int(retention.retention_type),
        0 if retention is None else retention.retention_param,
        0 if retention is None else retention.retention_max,
        list(config.tags),
        config.timestamp_aggregation_timeout,
        config.rollover_size_bytes,
    )


def config_from_row(row: Row) -> StreamConfig:
    retention = None
    if row["retention_type"] is not None:
        retention = RetentionPolicy(
            RetentionType(row["retention_type"]), row["retention_param"], row["retention_max"]
        )
    return StreamConfig(
        scaling=ScalingPolicy(
            ScaleType(row["scale_type"]), row["target_rate"], row["scale_factor"], row["min_num_segments"]
        ),
        retention=retention,
        tags=tuple(row["tags"]),
        timestamp_aggregation_timeout=row["timestamp_aggregation_timeout"],
        rollover_size_bytes=row["rollover_size_bytes"],
    )


def epoch_columns(epoch: EpochRecord) -> tuple[list[int], list[float], list[float], list[int]]:
    segs = epoch.sorted_segments()
    return (
        [s.id for s in segs],
        [s.key_start for s in segs],
        [s.key_end for s in segs],
        [s.creation_time for s in segs],
    )


def epoch_from_row(row: Row) -> EpochRecord:
    segments = tuple(
        SegmentRecord(number_of(sid), epoch_of(sid), ct, ks, ke)
        for sid, ks, ke, ct in zip(
            row["segment_ids"], row["key_starts"], row["key_ends"], row["segment_creation_times"], strict=True
        )
    )
    return EpochRecord(
        epoch=row["epoch"],
        reference_epoch=row["reference_epoch"],
        segments=segments,
        creation_time=row["creation_time"],
        splits=row["splits"],
        merges=row["merges"],
    )


def cut_to_json(cut: Mapping[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in cut.items()}


def cut_from_json(doc: Mapping[str, int]) -> dict[int, int]:
    return {int(k): int(v) for k, v in doc.items()}


def truncation_columns(record: TruncationRecord) -> tuple[Any, ...]:
    """Column values in the order of set_truncation's parameters (also complete_truncation's
    and start_truncation's): cut, span, deleted, to delete, size till the cut, updating."""
    return (
        cut_to_json(record.stream_cut),
        cut_to_json(record.span),
        sorted(record.deleted_segments),
        sorted(record.to_delete),
        record.size_till,
        record.updating,
    )


def truncation_from_row(row: Row) -> TruncationRecord:
    return TruncationRecord(
        stream_cut=cut_from_json(row["stream_cut"]),
        span=cut_from_json(row["span"]),
        deleted_segments=frozenset(row["deleted_segments"]),
        to_delete=frozenset(row["to_delete"]),
        size_till=row["size_till"],
        updating=row["updating"],
    )
