"""What the embedded segment store's wire server asks of its durable state (PostgreSQL).

Invariant: every call is one database transaction, so a reply the server sends after a call
returns describes committed state (an acknowledged append is durable), and a failed call has
changed nothing. The server maps each error below to one wire reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

# The wire's "no value" for an attribute (and a writer that never appended).
NULL_ATTRIBUTE_VALUE: Final = -(1 << 63)
# Table key versions with a meaning of their own: unconditional, and "must not exist yet".
NO_VERSION: Final = -(1 << 63)
NOT_EXISTS: Final = -1
# Pravega's table limits (TableStore.MAXIMUM_KEY_LENGTH / MAXIMUM_VALUE_LENGTH).
MAX_TABLE_KEY_BYTES: Final = 8192
MAX_TABLE_VALUE_BYTES: Final = 1024 * 1024 - 8192

SegmentKind = Literal["stream", "transaction", "table", "transient"]

# Awaited after an append commits and before its result goes back (the composition's failpoint:
# a crash test parks an append there, stored but not acknowledged), given what the appends were
# (for the log: a crash test checks that the group it killed held several writers' appends).
AfterAppend = Callable[[str], Awaitable[None]]


class StorageError(Exception):
    """Base of the expected refusals; `segment` names the segment the reply is about."""

    def __init__(self, segment: str, message: str = "") -> None:
        super().__init__(message or segment)
        self.segment = segment


class NoSuchSegment(StorageError):
    """The segment does not exist (never created, deleted, or merged away)."""


class SegmentAlreadyExists(StorageError):
    """A segment (of any kind) with this name exists."""


class SegmentSealed(StorageError):
    """Appending to, sealing again, or merging into a sealed segment."""


class SegmentTruncated(StorageError):
    """An offset below the segment's start (a read, a truncation, a truncated merge source),
    above its length (a truncation), or a table's length that is not the caller's
    `table_segment_offset`."""

    def __init__(self, segment: str, start_offset: int, message: str = "") -> None:
        super().__init__(segment, message)
        self.start_offset = start_offset


class OffsetBeyondEnd(StorageError):
    """A read past the end of a sealed segment (the wire's ErrorMessage, IllegalArgument)."""


class ConditionalCheckFailed(StorageError):
    """A conditional append whose expected offset is not the segment's length."""


class AttributeCheckFailed(StorageError):
    """A merge's conditional attribute update did not match; nothing was merged."""


class WrongSegmentKind(StorageError):
    """A table operation on a stream segment, or a stream operation on a table segment."""


class TableKeyBadVersion(StorageError):
    """A conditional table update or removal whose version does not match the key's."""


class TableKeyDoesNotExist(StorageError):
    """A conditional table update or removal (version >= 0) of a key that is absent."""


class TableSegmentNotEmpty(StorageError):
    """A table deletion with must_be_empty on a table that has keys."""


class ContainerMoved(StorageError):
    """The container map no longer gives the segment's container to this store (it learns so
    at the append, before its own copy of the map): the wire's WrongHost."""


class TooLarge(StorageError):
    """A table key or value over Pravega's limits, or an empty key."""


@dataclass(frozen=True, slots=True)
class SegmentState:
    name: str
    kind: SegmentKind
    length: int
    start_offset: int
    sealed: bool
    last_modified_ms: int
    # The scale policy CreateSegment/UpdateSegmentPolicy gave it (the wire's scale type byte and
    # target rate): what a store's auto-scaler reads for a segment it did not create.
    scale_type: int = 0
    target_rate: int = 0


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One append as the wire server hands it down the storage chain: `data` holds `num_events`
    events of one writer, the last numbered `last_event_number`; with `expected_offset` it is
    conditional on the segment's length being exactly that."""

    segment: str
    writer_id: int
    data: bytes
    last_event_number: int
    num_events: int
    expected_offset: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """`length` is the segment's length after the call; a duplicate (an event number at or below
    the writer's stored one) appends nothing and reports the current length."""

    length: int
    event_number: int
    previous_event_number: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Bytes from `offset` (at most the requested length), as `pieces` to be read in order (kept
    apart as the database returned them: a reply sends them without joining them first);
    `length`/`sealed` are the segment's at the time of the read, so the caller knows whether it
    is at the tail or the end."""

    offset: int
    pieces: tuple[bytes, ...]
    length: int
    start_offset: int
    sealed: bool

    @property
    def size(self) -> int:
        return sum(map(len, self.pieces))

    @property
    def data(self) -> bytes:
        return b"".join(self.pieces)


@dataclass(frozen=True, slots=True)
class AttributeUpdate:
    """A merge's conditional update of an attribute of the target (Replace or ReplaceIfEquals)."""

    attribute_id: int
    update_type: int
    new_value: int
    old_value: int


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: bytes
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class TablePage:
    """One page of keys or entries in key order; `token` resumes strictly after the last one
    (empty when nothing was returned and the caller should start over)."""

    entries: list[TableEntry]
    token: bytes


@dataclass(frozen=True, slots=True)
class TableDelta:
    """Entries changed at or after a position, newest value per key, by version; `last_position`
    is where the next delta read starts (strictly greater than the request's when entries came
    back)."""

    entries: list[TableEntry]
    last_position: int
    reached_end: bool


@dataclass(frozen=True, slots=True)
class TableInfo:
    start_offset: int
    length: int
    entry_count: int
    key_length: int


class SegmentStorage(Protocol):
    # Stream segments (and transaction and transient segments).
    async def create_segment(
        self,
        name: str,
        kind: SegmentKind,
        scale_type: int,
        target_rate: int,
        rollover_size_bytes: int,
    ) -> None:
        """Raises SegmentAlreadyExists for any existing segment of that name."""
        ...

    async def segment_state(self, name: str) -> SegmentState: ...

    async def writer_event_number(self, name: str, writer_id: int) -> int:
        """The writer's last stored event number, NULL_ATTRIBUTE_VALUE for a new writer; works on
        sealed segments."""
        ...

    def admission(self, segment: str) -> Awaitable[None] | None:
        """None when an append to `segment` may be stored at once; else what to await first (the
        long-term tier's throttle: it delays, never refuses). The connection awaits it before it
        hands the append on, so one connection's appends stay in order."""
        ...

    async def append(self, request: AppendRequest) -> AppendResult:
        """One transaction: refuse a sealed segment (SegmentSealed), then a wrong expected offset
        (ConditionalCheckFailed); skip a duplicate; else store the bytes at the end and the
        writer's event number."""
        ...

    async def read(self, name: str, offset: int, max_length: int) -> ReadResult:
        """SegmentTruncated below the start, OffsetBeyondEnd past a sealed segment's end; at the
        tail of an unsealed segment it returns no bytes (the server decides whether to wait)."""
        ...

    async def seal(self, name: str) -> int:
        """Returns the final length; SegmentSealed when it was sealed already."""
        ...

    async def truncate(self, name: str, offset: int) -> None:
        """SegmentTruncated unless start_offset <= offset <= length; allowed on sealed segments."""
        ...

    async def delete(self, name: str) -> None:
        """Removes the segment with its bytes and attributes, and its transaction segments."""
        ...

    async def update_policy(self, name: str, scale_type: int, target_rate: int) -> None: ...

    async def get_attribute(self, name: str, attribute_id: int) -> int: ...

    async def update_attribute(
        self, name: str, attribute_id: int, new_value: int, expected_value: int
    ) -> bool:
        """Compare-and-set; `expected_value` NULL_ATTRIBUTE_VALUE means "must be absent"."""
        ...

    async def merge(
        self, target: str, sources: Sequence[str], attribute_updates: Sequence[AttributeUpdate]
    ) -> list[int]:
        """Appends each source's bytes to the target in order, in one transaction: each source is
        sealed, concatenated, then deleted (its attributes are not copied). A source that no
        longer exists counts as merged already. Returns the target's length after each source.
        NoSuchSegment (target), SegmentSealed (target), SegmentTruncated (a truncated source),
        AttributeCheckFailed (nothing merged)."""
        ...

    # Table segments.
    async def create_table(self, name: str, key_length: int, rollover_size_bytes: int) -> None: ...

    async def delete_table(self, name: str, must_be_empty: bool) -> None: ...

    async def update_table(
        self, name: str, entries: Sequence[TableEntry], table_segment_offset: int
    ) -> list[int]:
        """All or nothing: every entry's version rule is checked before any is written; returns
        the new versions in input order."""
        ...

    async def remove_table_keys(
        self, name: str, keys: Sequence[tuple[bytes, int]], table_segment_offset: int
    ) -> None: ...

    async def read_table(self, name: str, keys: Sequence[bytes]) -> list[TableEntry]:
        """One entry per requested key in order; an absent key comes back with version -1 and an
        empty value."""
        ...

    async def read_table_page(
        self, name: str, suggested_count: int, token: bytes, from_key: bytes, to_key: bytes
    ) -> TablePage: ...

    async def read_table_delta(self, name: str, from_position: int, suggested_count: int) -> TableDelta: ...

    async def table_info(self, name: str) -> TableInfo: ...
