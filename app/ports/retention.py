"""The retention port: retention sets (stream cuts recorded over time), the truncations chosen
from them and the subscribers whose published cuts bound consumption-based retention; every
write of the retention worker is fenced by the stream's retention bucket."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.cluster import Fence
from app.domain.records import RetentionPolicy, StreamState, TruncationRecord, Versioned
from app.domain.requests import NewRequest
from app.domain.retention import StreamCutRecord, SubscriberRecord


class RetentionWrite(enum.Enum):
    """What a fenced retention write did."""

    WRITTEN = "written"
    UNCHANGED = "unchanged"  # nothing to do: not newer than the latest record, nothing to purge
    FENCED = "fenced"  # the bucket was claimed again since the fence: this process must stop


@dataclass(frozen=True, slots=True)
class RetentionMember:
    """A stream with a retention policy in one of the asked retention buckets."""

    scope: str
    name: str
    bucket: int
    latest_recording_time: int | None  # None: its retention set is empty


@dataclass(frozen=True, slots=True)
class RetentionContext:
    """Everything one retention cycle reads about a stream, read together."""

    state: StreamState
    policy: RetentionPolicy | None
    active_epoch: int
    truncation: Versioned[TruncationRecord]
    records: tuple[StreamCutRecord, ...]  # the retention set, oldest first
    subscriber_cuts: tuple[dict[int, int], ...]  # published cuts, by subscriber name


class RetentionStore(Protocol):
    """Retention sets and subscribers. Writes of the retention worker carry the Fence of the
    stream's retention bucket and do nothing (FENCED) once its generation moved on. A missing
    stream raises NotFound."""

    async def list_members(self, buckets: Sequence[int], bucket_count: int) -> list[RetentionMember]:
        """Streams with a retention policy in `buckets`, one statement; internal (`_system`),
        creating, sealing and sealed streams are left out."""
        ...

    async def get_context(self, scope: str, name: str) -> RetentionContext: ...

    async def add_record(
        self, scope: str, name: str, record: StreamCutRecord, fence: Fence
    ) -> RetentionWrite:
        """Appends to the retention set only if newer than its latest record (else UNCHANGED)."""
        ...

    async def purge_records(self, scope: str, name: str, up_to_time: int, fence: Fence) -> RetentionWrite:
        """Removes the records recorded at or before `up_to_time`."""
        ...

    async def start_truncation(
        self,
        scope: str,
        name: str,
        record: TruncationRecord,
        expected_version: int,
        request: NewRequest,
        fence: Fence,
    ) -> RetentionWrite:
        """The truncate API's first step under a fence: the new (updating) truncation record at
        the version read, and its request in the same transaction. Raises WriteConflict."""
        ...

    async def list_subscribers(self, scope: str, name: str) -> list[Versioned[SubscriberRecord]]:
        """By subscriber name."""
        ...

    async def get_subscriber(
        self, scope: str, name: str, subscriber: str
    ) -> Versioned[SubscriberRecord] | None: ...

    async def insert_subscriber(self, scope: str, name: str, record: SubscriberRecord) -> bool:
        """False when the subscriber exists already (nothing is changed then)."""
        ...

    async def set_subscriber(
        self, scope: str, name: str, record: SubscriberRecord, expected_version: int
    ) -> int:
        """Replaces the subscriber's record at the version read; raises WriteConflict, or
        NotFound when the subscriber (or the stream) is gone."""
        ...

    async def delete_subscriber(self, scope: str, name: str, subscriber: str, expected_version: int) -> bool:
        """False when it was gone already; raises WriteConflict when it changed since read."""
        ...
