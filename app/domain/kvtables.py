"""Key-value tables: configuration rules, states, table-segment names and ranges.

A table's segments are fixed at creation: `partition_count` segments of epoch 0 numbered from
its safe starting number, with uniform key ranges, so they are derived here, never stored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from app.domain.errors import InvalidInput, OperationNotAllowed
from app.domain.ids import epoch_of, number_of
from app.domain.limits import MAX_BYTES, MAX_SEGMENTS_PER_EPOCH
from app.domain.records import SegmentRecord
from app.domain.segment_names import kvt_stream_name as kvt_stream_name
from app.domain.segment_names import table_segment_name as _table_segment_name
from app.domain.validation import check_range

# The segment store refuses fixed-key table segments with longer keys
# (FixedKeyLengthTableSegmentLayout#ensureValidKeyLength, AttributeId.MAX_LENGTH). Java's
# controller accepts such a table and then never finishes creating it; we refuse it up front.
MAX_TOTAL_KEY_LENGTH = 256


@dataclass(frozen=True, slots=True)
class KvtConfig:
    partition_count: int
    primary_key_length: int
    secondary_key_length: int = 0
    rollover_size_bytes: int = 0

    @property
    def key_length(self) -> int:
        """The fixed key length of every table segment: primary plus secondary."""
        return self.primary_key_length + self.secondary_key_length

    def validate(self) -> None:
        # The same checks, in the same order, as KeyValueTableConfiguration's builder and
        # ControllerService#createKeyValueTable's preconditions.
        if self.partition_count <= 0:
            raise InvalidInput(f"partitionCount must be a positive integer, got {self.partition_count}")
        # One segment per partition, all created at once: the same bound as a stream's epoch.
        check_range(
            "partitionCount", self.partition_count, 1, MAX_SEGMENTS_PER_EPOCH, "segments of one table"
        )
        if self.primary_key_length <= 0:
            raise InvalidInput(f"primaryKeyLength must be a positive integer, got {self.primary_key_length}")
        if self.secondary_key_length < 0:
            raise InvalidInput(
                f"secondaryKeyLength must be a non-negative integer, got {self.secondary_key_length}"
            )
        if self.rollover_size_bytes < 0:
            raise InvalidInput(f"rolloverSizeBytes must not be negative, got {self.rollover_size_bytes}")
        check_range("rolloverSizeBytes", self.rollover_size_bytes, 0, MAX_BYTES)
        if self.key_length > MAX_TOTAL_KEY_LENGTH:
            raise InvalidInput(
                f"primaryKeyLength + secondaryKeyLength must be at most {MAX_TOTAL_KEY_LENGTH}, "
                f"got {self.key_length}"
            )


class KvtState(enum.Enum):
    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


# KVTableState's transitions; UNKNOWN is "no row" here. DELETING is terminal: the row goes.
_ALLOWED: dict[KvtState, frozenset[KvtState]] = {
    KvtState.CREATING: frozenset({KvtState.ACTIVE, KvtState.DELETING}),
    KvtState.ACTIVE: frozenset({KvtState.DELETING}),
    KvtState.DELETING: frozenset(),
}


def check_kvt_transition(current: KvtState, new: KvtState) -> None:
    if current != new and new not in _ALLOWED[current]:
        raise OperationNotAllowed(f"key-value table state cannot move from {current.value} to {new.value}")


def table_segment_name(scope: str, kvt: str, segment: int) -> str:
    """NameUtils#getQualifiedTableSegmentName of the table's segment with id `segment`."""
    return _table_segment_name(scope, kvt, number_of(segment), epoch_of(segment))


def safe_starting_number(last_deleted_number: int | None) -> int:
    """0 for a name never used; after a deletion, one past the deleted table's highest segment
    number, so a re-created table never reuses a name the segment store may still be deleting."""
    return 0 if last_deleted_number is None else last_deleted_number + 1


def table_segments(config: KvtConfig, start_number: int, creation_time: int) -> list[SegmentRecord]:
    """The table's segments seg(n, 0), in key order, with the uniform ranges `[i/p, (i+1)/p)`
    computed as Java does (`i * (1.0 / p)`), so clients see the same doubles."""
    chunk = 1.0 / config.partition_count
    return [
        SegmentRecord(start_number + i, 0, creation_time, i * chunk, (i + 1) * chunk)
        for i in range(config.partition_count)
    ]


@dataclass(frozen=True, slots=True)
class KvtRecord:
    """One table as stored: `id` is the UUID of this incarnation (requests name it, so a request
    for an earlier table of the same name does nothing to a re-created one)."""

    scope: str
    name: str
    id: str
    config: KvtConfig
    state: KvtState
    creation_time: int
    start_number: int

    @property
    def segments(self) -> list[SegmentRecord]:
        return table_segments(self.config, self.start_number, self.creation_time)

    @property
    def segment_names(self) -> list[str]:
        return [table_segment_name(self.scope, self.name, s.id) for s in self.segments]

    @property
    def last_segment_number(self) -> int:
        return self.start_number + self.config.partition_count - 1
