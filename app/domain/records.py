"""Immutable metadata records, named as in Pravega's controller so designs can be cross-read.

Records are values: a change is a new record written under a version check by the store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from app.domain.ids import segment_id
from app.domain.names import validate_tags
from app.domain.validation import check_retention, check_scaling, check_stream_limits

T = TypeVar("T")


class ScaleType(enum.IntEnum):
    FIXED_NUM_SEGMENTS = 0
    BY_RATE_IN_KBYTES_PER_SEC = 1
    BY_RATE_IN_EVENTS_PER_SEC = 2


class RetentionType(enum.IntEnum):
    TIME = 1
    SIZE = 2


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    scale_type: ScaleType
    target_rate: int
    scale_factor: int
    min_num_segments: int

    @staticmethod
    def fixed(segments: int) -> ScalingPolicy:
        return ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, 0, 0, segments)

    def validate(self) -> None:
        # Pravega's server trusts the decoded protobuf; we refuse what its client factories refuse,
        # and counts or factors no epoch could hold.
        fixed = self.scale_type == ScaleType.FIXED_NUM_SEGMENTS
        check_scaling(self.scale_type.name, fixed, self.target_rate, self.scale_factor, self.min_num_segments)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    retention_type: RetentionType
    retention_param: int
    retention_max: int

    def validate(self) -> None:
        check_retention(self.retention_type == RetentionType.TIME, self.retention_param, self.retention_max)


@dataclass(frozen=True, slots=True)
class StreamConfig:
    scaling: ScalingPolicy
    retention: RetentionPolicy | None = None
    tags: tuple[str, ...] = ()
    timestamp_aggregation_timeout: int = 0
    rollover_size_bytes: int = 0

    def __post_init__(self) -> None:
        # Tags are a set; keeping them sorted and unique makes equal sets equal values.
        object.__setattr__(self, "tags", tuple(sorted(set(self.tags))))

    def validate(self) -> None:
        self.scaling.validate()
        if self.retention is not None:
            self.retention.validate()
        validate_tags(self.tags)
        check_stream_limits(self.timestamp_aggregation_timeout, self.rollover_size_bytes)

    def equal_ignoring_tags(self, other: StreamConfig) -> bool:
        return (
            self.scaling == other.scaling
            and self.retention == other.retention
            and self.timestamp_aggregation_timeout == other.timestamp_aggregation_timeout
            and self.rollover_size_bytes == other.rollover_size_bytes
        )


class StreamState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    UPDATING = "UPDATING"
    SCALING = "SCALING"
    COMMITTING_TXN = "COMMITTING_TXN"
    TRUNCATING = "TRUNCATING"
    SEALING = "SEALING"
    SEALED = "SEALED"


class ScopeState(enum.Enum):
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    number: int
    creation_epoch: int
    creation_time: int
    key_start: float
    key_end: float

    @property
    def id(self) -> int:
        return segment_id(self.number, self.creation_epoch)

    def overlaps(self, other: SegmentRecord) -> bool:
        return self.key_start < other.key_end and self.key_end > other.key_start


@dataclass(frozen=True, slots=True)
class EpochRecord:
    epoch: int
    reference_epoch: int
    segments: tuple[SegmentRecord, ...]
    creation_time: int
    splits: int = 0
    merges: int = 0

    @property
    def is_duplicate(self) -> bool:
        return self.epoch != self.reference_epoch

    def sorted_segments(self) -> tuple[SegmentRecord, ...]:
        return tuple(sorted(self.segments, key=lambda s: s.key_start))

    def contains(self, segment: int) -> bool:
        return any(s.id == segment for s in self.segments)


@dataclass(frozen=True, slots=True)
class EpochTransitionRecord:
    """A scale in flight: which segments of `active_epoch` it seals and which it creates."""

    active_epoch: int
    time: int
    segments_to_seal: frozenset[int]
    new_segments: tuple[tuple[int, float, float], ...]  # (segment id, key start, key end)

    @property
    def new_epoch(self) -> int:
        return self.active_epoch + 1


@dataclass(frozen=True, slots=True)
class TruncationRecord:
    stream_cut: dict[int, int] = field(default_factory=dict)
    span: dict[int, int] = field(default_factory=dict)  # segment id -> highest epoch holding it
    deleted_segments: frozenset[int] = frozenset()
    to_delete: frozenset[int] = frozenset()
    size_till: int = 0
    updating: bool = False


# Sealed segments' final sizes (what size_till adds up) are stored in shards: a segment's size is
# in shard `creation epoch // SEALED_SIZE_SHARD_EPOCHS` of its stream, so no row grows without
# bound. Stored rows were sharded with this value, so every writer and reader (the workflows,
# truncation, retention, the seeder) takes it from here; changing it needs a data migration.
SEALED_SIZE_SHARD_EPOCHS: Final = 1000


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A record as read, with the version a conditional write must present."""

    value: T
    version: int


@dataclass(frozen=True, slots=True)
class StreamSummary:
    scope: str
    name: str
    state: StreamState
    config: StreamConfig
    creation_time: int
    active_epoch: int
