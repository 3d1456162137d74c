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

    @property
    def key(self) -> str:
        return request_key(self.scope, self.stream)
