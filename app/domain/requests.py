"""Durable requests: the rows that stand in for Pravega's internal request stream.

A request is keyed by `scope/stream`; the key's bucket decides which process consumes it,
and every request of one key runs in id order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.domain.cluster import stream_bucket
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfig,
    TruncationRecord,
)


class Processor(enum.Enum):
    """Which queue runs a request: the stream requests (serial per stream), the commit queue
    (serial per stream), or transaction aborts (not serialised at all)."""

    REQUESTS = "requests"
    COMMITS = "commits"
    # Aborts touch no stream state and run concurrently, even within a stream.
    ABORTS = "aborts"


class RequestKind(enum.Enum):
    UPDATE_STREAM = "update_stream"
    SCALE = "scale"
    TRUNCATE_STREAM = "truncate_stream"
    SEAL_STREAM = "seal_stream"
    DELETE_STREAM = "delete_stream"
    DELETE_SCOPE = "delete_scope"
    COMMIT_TXNS = "commit_txns"
    ABORT_TXN = "abort_txn"
    AUTO_SCALE = "auto_scale"
    CREATE_KVT = "create_kvt"
    DELETE_KVT = "delete_kvt"
    CREATE_READER_GROUP = "create_reader_group"
    UPDATE_READER_GROUP = "update_reader_group"
    DELETE_READER_GROUP = "delete_reader_group"
    CREATE_STREAM = "create_stream"


def request_key(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"


def request_bucket(scope: str, stream: str, bucket_count: int) -> int:
    """The bucket the database files a key's requests under (pgc_request_bucket): Pravega's
    bucket rule over the cluster's fixed request-bucket count."""
    return stream_bucket(scope, stream, bucket_count)


@dataclass(frozen=True, slots=True)
class NewRequest:
    kind: RequestKind
    scope: str
    stream: str  # "" for scope-wide requests
    created_at: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    processor: Processor = Processor.REQUESTS


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    kind: RequestKind
    scope: str
    stream: str
    bucket: int
    payload: Mapping[str, Any]
    created_at: int
    not_before: int
    attempts: int
    started: bool
    last_error: str | None
    version: int
    processor: Processor = Processor.REQUESTS
    # Set when the request failed finally and was parked (its error is `last_error`): it is out
    # of its stream's queue until an operator retries or drops it.
    parked_at: int | None = None
    # Failed attempts, not counting postponements for a state transition.
    failures: int = 0
    # The request id of the call that enqueued it: its workflow logs under the same id.
    trace_id: str | None = None

    @property
    def parked(self) -> bool:
        return self.parked_at is not None

    @property
    def key(self) -> str:
        return request_key(self.scope, self.stream)


# A truncation request carries the record it replaces, so that parking it (a final failure) can
# put the stream's truncation back exactly as it was; the updating record does not keep it.
PREVIOUS_TRUNCATION = "previous_truncation"


def truncation_payload(previous: TruncationRecord) -> dict[str, Any]:
    return {
        PREVIOUS_TRUNCATION: {
            "stream_cut": {str(k): v for k, v in previous.stream_cut.items()},
            "span": {str(k): v for k, v in previous.span.items()},
            "deleted_segments": sorted(previous.deleted_segments),
            "to_delete": sorted(previous.to_delete),
            "size_till": previous.size_till,
        }
    }


def previous_truncation(payload: Mapping[str, Any]) -> TruncationRecord | None:
    """The record a truncation request replaced (never updating), or None for a request written
    without it (by a version before parking existed)."""
    raw = payload.get(PREVIOUS_TRUNCATION)
    if not isinstance(raw, Mapping):
        return None
    return TruncationRecord(
        stream_cut={int(k): int(v) for k, v in raw["stream_cut"].items()},
        span={int(k): int(v) for k, v in raw["span"].items()},
        deleted_segments=frozenset(int(s) for s in raw["deleted_segments"]),
        to_delete=frozenset(int(s) for s in raw["to_delete"]),
        size_till=int(raw["size_till"]),
        updating=False,
    )


# An update request carries the configuration it replaces, so that parking it can put the stream's
# configuration back; the "updating" record holds only the new one.
PREVIOUS_CONFIG = "previous_config"


def config_payload(previous: StreamConfig) -> dict[str, Any]:
    retention = previous.retention
    return {
        PREVIOUS_CONFIG: {
            "scaling": [
                previous.scaling.scale_type.value,
                previous.scaling.target_rate,
                previous.scaling.scale_factor,
                previous.scaling.min_num_segments,
            ],
            "retention": None
            if retention is None
            else [retention.retention_type.value, retention.retention_param, retention.retention_max],
            "tags": list(previous.tags),
            "timestamp_aggregation_timeout": previous.timestamp_aggregation_timeout,
            "rollover_size_bytes": previous.rollover_size_bytes,
        }
    }


def previous_config(payload: Mapping[str, Any]) -> StreamConfig | None:
    """The configuration an update request replaced, or None for a request written without it."""
    raw = payload.get(PREVIOUS_CONFIG)
    if not isinstance(raw, Mapping):
        return None
    scale_type, rate, factor, minimum = raw["scaling"]
    retention = raw["retention"]
    return StreamConfig(
        scaling=ScalingPolicy(ScaleType(scale_type), int(rate), int(factor), int(minimum)),
        retention=None
        if retention is None
        else RetentionPolicy(RetentionType(retention[0]), int(retention[1]), int(retention[2])),
        tags=tuple(str(tag) for tag in raw["tags"]),
        timestamp_aggregation_timeout=int(raw["timestamp_aggregation_timeout"]),
        rollover_size_bytes=int(raw["rollover_size_bytes"]),
    )
