"""Pravega's WireCommands as frozen dataclasses, fields in wire order. Invariant: each field's
annotation names its wire encoding, which is all the codec knows of a layout; a field with a
default is a trailing one that older or Rust peers may omit, and decoding fills the default in.
Every field holding segments' qualified names is marked so (`Names.SEGMENT`), and that mark is
the only way anything finds the segments a command names (`SEGMENT_FIELDS`, `segments_named`).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass
from typing import Annotated, ClassVar, Final, TypeAlias

# The protocol version we announce: the highest whose commands we implement (MergeSegmentsBatch
# arrived in 15; 16 moved InvalidEventNumber's fields and 17 added LocateOffset semantics).
WIRE_VERSION: Final = 15
OLDEST_COMPATIBLE_VERSION: Final = 5
# Largest payload a frame may carry (the 8-byte header excluded), on both Java and Rust peers.
MAX_WIRECOMMAND_SIZE: Final = 0xFFFFFF
# "No value" for an attribute, and the last event number of a writer that never appended.
NULL_ATTRIBUTE_VALUE: Final = -(1 << 63)
# Table key versions with a meaning of their own: unconditional, and "must not exist yet".
TABLE_KEY_NO_VERSION: Final = -(1 << 63)
TABLE_KEY_NOT_EXISTS: Final = -1
# UpdateTableEntries / RemoveTableKeys without an offset condition.
NULL_TABLE_SEGMENT_OFFSET: Final = -1


class Wire(enum.Enum):
    """How one field travels (big-endian throughout)."""

    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    BOOL = "bool"  # one byte, 0 or 1
    U128 = "u128"  # 16 bytes: most significant long, then least significant
    STR = "str"  # u16 byte length + UTF-8
    BYTES = "bytes"  # i32 length + raw
    REST = "rest"  # raw to the end of the frame, no length prefix
    PADDING = "padding"  # `length` zero bytes filling the rest of the frame
    EVENT = "event"  # a nested Event: i32 type 0, i32 length, raw
    STRS = "strs"  # i32 count + strings
    I64S = "i64s"  # i32 count + longs
    TABLE_KEYS = "table_keys"  # i32 count + TableKey
    TABLE_ENTRIES = "table_entries"  # i32 count + (TableKey, TableValue)
    ATTRIBUTE_UPDATES = "attribute_updates"  # i32 count + ConditionalAttributeUpdate
    CHUNKS = "chunks"  # i32 count + ChunkInfo
    # SegmentsBatchMerged: Java interleaves (source, offset) pairs after one count; the sources
    # field carries the pairs and the offsets field rides along with it.
    MERGED_SOURCES = "merged_sources"
    MERGED_OFFSETS = "merged_offsets"


class Names(enum.Enum):
    """What a field names, marked beside its Wire kind (the codec reads only the Wire kind).

    SEGMENT: the field holds a segment's qualified name, or for a list, one in each item. The
    segment store's ownership check (WrongHost) and delegation-token check, and the controller's
    messages about a reply, find a command's segments by this mark alone, whatever the field is
    called: a new command's segment field is checked as soon as it is declared with it.
    """

    SEGMENT = "segment"


I32: TypeAlias = Annotated[int, Wire.I32]
I64: TypeAlias = Annotated[int, Wire.I64]
U8: TypeAlias = Annotated[int, Wire.U8]
Bool: TypeAlias = Annotated[bool, Wire.BOOL]
U128: TypeAlias = Annotated[int, Wire.U128]
Str: TypeAlias = Annotated[str, Wire.STR]
Bytes: TypeAlias = Annotated[bytes, Wire.BYTES]
Rest: TypeAlias = Annotated[bytes, Wire.REST]
Segment: TypeAlias = Annotated[str, Wire.STR, Names.SEGMENT]
Segments: TypeAlias = Annotated[tuple[str, ...], Wire.STRS, Names.SEGMENT]


# --- nested structures (not commands) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableKey:
    """A table key and its version condition; Pravega never sends an empty key."""

    data: bytes
    key_version: int


@dataclass(frozen=True, slots=True)
class TableValue:
    data: bytes


@dataclass(frozen=True, slots=True)
class ConditionalAttributeUpdate:
    """One attribute change applied atomically with a merge (type: 1 Replace, 4 ReplaceIfEquals)."""

    attribute_id: U128
    attribute_update_type: U8
    new_value: I64
    old_value: I64


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    length_in_metadata: I64
    length_in_storage: I64
    start_offset: I64
    chunk_name: Str
    exists_in_storage: Bool


TableEntries: TypeAlias = Annotated[tuple[tuple[TableKey, TableValue], ...], Wire.TABLE_ENTRIES]
TableKeys: TypeAlias = Annotated[tuple[TableKey, ...], Wire.TABLE_KEYS]


class Command:
    """Base of every wire command; TYPE is Pravega's WireCommandType code."""

    __slots__ = ()
    TYPE: ClassVar[int]


# --- handshake and append path ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hello(Command):
    TYPE: ClassVar[int] = -127
    high_version: I32
    low_version: I32


@dataclass(frozen=True, slots=True)
class KeepAlive(Command):
    TYPE: ClassVar[int] = 100


@dataclass(frozen=True, slots=True)
class Padding(Command):
    """Filler closing a Java AppendBlock; `length` zero bytes, nested inside the block."""

    TYPE: ClassVar[int] = -1
    length: Annotated[int, Wire.PADDING]


@dataclass(frozen=True, slots=True)
class PartialEvent(Command):
    """The prefix of an event split across a Java AppendBlock and its AppendBlockEnd."""

    TYPE: ClassVar[int] = -2
    data: Rest


@dataclass(frozen=True, slots=True)
class Event(Command):
    """One event as stored in segment data: encoding it yields the 8-byte-header framed event."""

    TYPE: ClassVar[int] = 0
    data: Rest


@dataclass(frozen=True, slots=True)
class SetupAppend(Command):
    TYPE: ClassVar[int] = 1
    request_id: I64
    writer_id: U128
    segment: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class AppendSetup(Command):
    TYPE: ClassVar[int] = 2
    request_id: I64
    segment: Segment
    writer_id: U128
    last_event_number: I64


@dataclass(frozen=True, slots=True)
class AppendBlock(Command):
    """Java's batched append opening: whole events, then a nested PartialEvent or Padding frame."""

    TYPE: ClassVar[int] = 3
    writer_id: U128
    data: Rest


@dataclass(frozen=True, slots=True)
class AppendBlockEnd(Command):
    TYPE: ClassVar[int] = 4
    writer_id: U128
    size_of_whole_events: I32
    data: Bytes
    num_event: I32
    last_event_number: I64
    request_id: I64 = -1


@dataclass(frozen=True, slots=True)
class ConditionalAppend(Command):
    TYPE: ClassVar[int] = 5
    writer_id: U128
    event_number: I64
    expected_offset: I64
    event: Annotated[Event, Wire.EVENT]
    request_id: I64 = -1


@dataclass(frozen=True, slots=True)
class ConditionalBlockEnd(Command):
    TYPE: ClassVar[int] = 89
    writer_id: U128
    event_number: I64
    expected_offset: I64
    data: Bytes
    request_id: I64


@dataclass(frozen=True, slots=True)
class DataAppended(Command):
    TYPE: ClassVar[int] = 7
    writer_id: U128
    event_number: I64
    previous_event_number: I64 = -1
    request_id: I64 = -1
    current_segment_write_offset: I64 = -1


@dataclass(frozen=True, slots=True)
class ConditionalCheckFailed(Command):
    TYPE: ClassVar[int] = 8
    writer_id: U128
    event_number: I64
    request_id: I64 = -1


# --- reads and segment metadata ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadSegment(Command):
    TYPE: ClassVar[int] = 9
    segment: Segment
    offset: I64
    suggested_length: I32
    delegation_token: Str
    request_id: I64 = -1


@dataclass(frozen=True, slots=True)
class SegmentRead(Command):
    TYPE: ClassVar[int] = 10
    segment: Segment
    offset: I64
    at_tail: Bool
    end_of_segment: Bool
    data: Bytes
    request_id: I64 = -1


@dataclass(frozen=True, slots=True)
class GetStreamSegmentInfo(Command):
    TYPE: ClassVar[int] = 11
    request_id: I64
    segment_name: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class StreamSegmentInfo(Command):
    TYPE: ClassVar[int] = 12
    request_id: I64
    segment_name: Segment
    exists: Bool
    is_sealed: Bool
    is_deleted: Bool
    last_modified: I64
    write_offset: I64
    start_offset: I64 = 0


@dataclass(frozen=True, slots=True)
class CreateSegment(Command):
    """scale_type: 0 NoScaling, 1 Throughput (KB/s), 2 EventRate."""

    TYPE: ClassVar[int] = 20
    request_id: I64
    segment: Segment
    target_rate: I32
    scale_type: U8
    delegation_token: Str
    rollover_size_bytes: I64 = 0


@dataclass(frozen=True, slots=True)
class SegmentCreated(Command):
    TYPE: ClassVar[int] = 21
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class CreateTransientSegment(Command):
    TYPE: ClassVar[int] = 40
    request_id: I64
    writer_id: U128
    parent_segment: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SealSegment(Command):
    TYPE: ClassVar[int] = 28
    request_id: I64
    segment: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentSealed(Command):
    TYPE: ClassVar[int] = 29
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class DeleteSegment(Command):
    TYPE: ClassVar[int] = 30
    request_id: I64
    segment: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentDeleted(Command):
    TYPE: ClassVar[int] = 31
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class UpdateSegmentPolicy(Command):
    TYPE: ClassVar[int] = 32
    request_id: I64
    segment: Segment
    target_rate: I32
    scale_type: U8
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentPolicyUpdated(Command):
    TYPE: ClassVar[int] = 33
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class GetSegmentAttribute(Command):
    TYPE: ClassVar[int] = 34
    request_id: I64
    segment_name: Segment
    attribute_id: U128
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentAttribute(Command):
    TYPE: ClassVar[int] = 35
    request_id: I64
    value: I64


@dataclass(frozen=True, slots=True)
class UpdateSegmentAttribute(Command):
    TYPE: ClassVar[int] = 36
    request_id: I64
    segment_name: Segment
    attribute_id: U128
    new_value: I64
    expected_value: I64
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentAttributeUpdated(Command):
    TYPE: ClassVar[int] = 37
    request_id: I64
    success: Bool


@dataclass(frozen=True, slots=True)
class TruncateSegment(Command):
    TYPE: ClassVar[int] = 38
    request_id: I64
    segment: Segment
    truncation_offset: I64
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentTruncated(Command):
    TYPE: ClassVar[int] = 39
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class LocateOffset(Command):
    TYPE: ClassVar[int] = 41
    request_id: I64
    segment: Segment
    target_offset: I64
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class OffsetLocated(Command):
    TYPE: ClassVar[int] = 42
    request_id: I64
    segment: Segment
    offset: I64


@dataclass(frozen=True, slots=True)
class MergeSegments(Command):
    TYPE: ClassVar[int] = 58
    request_id: I64
    target: Segment
    source: Segment
    delegation_token: Str
    attribute_updates: Annotated[tuple[ConditionalAttributeUpdate, ...], Wire.ATTRIBUTE_UPDATES] = ()


@dataclass(frozen=True, slots=True)
class SegmentsMerged(Command):
    TYPE: ClassVar[int] = 59
    request_id: I64
    target: Segment
    source: Segment
    new_target_write_offset: I64 = -1


@dataclass(frozen=True, slots=True)
class MergeSegmentsBatch(Command):
    TYPE: ClassVar[int] = 90
    request_id: I64
    target: Segment
    sources: Segments
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class SegmentsBatchMerged(Command):
    """Java's layout: one count, then (source, new target write offset) pairs."""

    TYPE: ClassVar[int] = 91
    request_id: I64
    target: Segment
    sources: Annotated[tuple[str, ...], Wire.MERGED_SOURCES, Names.SEGMENT]
    new_target_write_offsets: Annotated[tuple[int, ...], Wire.MERGED_OFFSETS]


# --- error replies ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrongHost(Command):
    TYPE: ClassVar[int] = 50
    request_id: I64
    segment: Segment
    correct_host: Str
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class SegmentIsSealed(Command):
    TYPE: ClassVar[int] = 51
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""
    offset: I64 = -1


@dataclass(frozen=True, slots=True)
class SegmentAlreadyExists(Command):
    TYPE: ClassVar[int] = 52
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class NoSuchSegment(Command):
    TYPE: ClassVar[int] = 53
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""
    offset: I64 = -1


@dataclass(frozen=True, slots=True)
class InvalidEventNumber(Command):
    """The version-15 layout (what the Rust client reads); version 16 inserted a request id."""

    TYPE: ClassVar[int] = 55
    writer_id: U128
    event_number: I64
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class SegmentIsTruncated(Command):
    TYPE: ClassVar[int] = 56
    request_id: I64
    segment: Segment
    start_offset: I64
    server_stack_trace: Str = ""
    offset: I64 = -1


@dataclass(frozen=True, slots=True)
class OperationUnsupported(Command):
    TYPE: ClassVar[int] = 57
    request_id: I64
    operation_name: Str
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class AuthTokenCheckFailed(Command):
    """error_code: -1 unspecified, 0 check failed, 1 expired (the Rust client panics on others)."""

    TYPE: ClassVar[int] = 60
    request_id: I64
    server_stack_trace: Str = ""
    error_code: I32 = -1


@dataclass(frozen=True, slots=True)
class ErrorMessage(Command):
    """error_code: -1 unspecified, 0 illegal argument."""

    TYPE: ClassVar[int] = 61
    request_id: I64
    segment: Segment
    message: Str
    error_code: I32


# --- table segments ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetTableSegmentInfo(Command):
    TYPE: ClassVar[int] = 68
    request_id: I64
    segment_name: Segment
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class TableSegmentInfo(Command):
    TYPE: ClassVar[int] = 69
    request_id: I64
    segment_name: Segment
    start_offset: I64
    length: I64
    entry_count: I64
    key_length: I32


@dataclass(frozen=True, slots=True)
class CreateTableSegment(Command):
    TYPE: ClassVar[int] = 70
    request_id: I64
    segment: Segment
    delegation_token: Str
    sorted: Bool = False
    key_length: I32 = 0
    rollover_size_bytes: I64 = 0


@dataclass(frozen=True, slots=True)
class DeleteTableSegment(Command):
    TYPE: ClassVar[int] = 71
    request_id: I64
    segment: Segment
    must_be_empty: Bool
    delegation_token: Str


@dataclass(frozen=True, slots=True)
class UpdateTableEntries(Command):
    TYPE: ClassVar[int] = 74
    request_id: I64
    segment: Segment
    delegation_token: Str
    entries: TableEntries
    table_segment_offset: I64 = NULL_TABLE_SEGMENT_OFFSET


@dataclass(frozen=True, slots=True)
class TableEntriesUpdated(Command):
    """The new versions, one per updated entry, in request order."""

    TYPE: ClassVar[int] = 75
    request_id: I64
    versions: Annotated[tuple[int, ...], Wire.I64S]


@dataclass(frozen=True, slots=True)
class RemoveTableKeys(Command):
    TYPE: ClassVar[int] = 76
    request_id: I64
    segment: Segment
    delegation_token: Str
    keys: TableKeys
    table_segment_offset: I64 = NULL_TABLE_SEGMENT_OFFSET


@dataclass(frozen=True, slots=True)
class TableKeysRemoved(Command):
    TYPE: ClassVar[int] = 77
    request_id: I64
    segment: Segment


@dataclass(frozen=True, slots=True)
class ReadTable(Command):
    TYPE: ClassVar[int] = 78
    request_id: I64
    segment: Segment
    delegation_token: Str
    keys: TableKeys


@dataclass(frozen=True, slots=True)
class TableRead(Command):
    TYPE: ClassVar[int] = 79
    request_id: I64
    segment: Segment
    entries: TableEntries


@dataclass(frozen=True, slots=True)
class TableSegmentNotEmpty(Command):
    TYPE: ClassVar[int] = 80
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class TableKeyDoesNotExist(Command):
    TYPE: ClassVar[int] = 81
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class TableKeyBadVersion(Command):
    TYPE: ClassVar[int] = 82
    request_id: I64
    segment: Segment
    server_stack_trace: Str = ""


@dataclass(frozen=True, slots=True)
class ReadTableKeys(Command):
    """prefix_filter is deprecated (always empty); the Rust client sends only the token."""

    TYPE: ClassVar[int] = 83
    request_id: I64
    segment: Segment
    delegation_token: Str
    suggested_count: I32
    continuation_token: Bytes
    prefix_filter: Bytes = b""
    from_key: Bytes = b""
    to_key: Bytes = b""


@dataclass(frozen=True, slots=True)
class TableKeysRead(Command):
    TYPE: ClassVar[int] = 84
    request_id: I64
    segment: Segment
    keys: TableKeys
    continuation_token: Bytes


@dataclass(frozen=True, slots=True)
class ReadTableEntries(Command):
    """prefix_filter is deprecated (always empty); the Rust client sends only the token."""

    TYPE: ClassVar[int] = 85
    request_id: I64
    segment: Segment
    delegation_token: Str
    suggested_count: I32
    continuation_token: Bytes
    prefix_filter: Bytes = b""
    from_key: Bytes = b""
    to_key: Bytes = b""


@dataclass(frozen=True, slots=True)
class TableEntriesRead(Command):
    TYPE: ClassVar[int] = 86
    request_id: I64
    segment: Segment
    entries: TableEntries
    continuation_token: Bytes


@dataclass(frozen=True, slots=True)
class TableEntriesDeltaRead(Command):
    TYPE: ClassVar[int] = 87
    request_id: I64
    segment: Segment
    entries: TableEntries
    should_clear: Bool
    reached_end: Bool
    last_position: I64


@dataclass(frozen=True, slots=True)
class ReadTableEntriesDelta(Command):
    TYPE: ClassVar[int] = 88
    request_id: I64
    segment: Segment
    delegation_token: Str
    from_position: I64
    suggested_entry_count: I32


# --- admin port -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlushToStorage(Command):
    TYPE: ClassVar[int] = -3
    container_id: I32
    delegation_token: Str
    request_id: I64


@dataclass(frozen=True, slots=True)
class StorageFlushed(Command):
    TYPE: ClassVar[int] = -4
    request_id: I64


@dataclass(frozen=True, slots=True)
class ListStorageChunks(Command):
    TYPE: ClassVar[int] = -5
    segment: Segment
    delegation_token: Str
    request_id: I64


@dataclass(frozen=True, slots=True)
class StorageChunksListed(Command):
    TYPE: ClassVar[int] = -6
    request_id: I64
    chunks: Annotated[tuple[ChunkInfo, ...], Wire.CHUNKS]


def _all_commands() -> dict[int, type[Command]]:
    # The module's names, not Command.__subclasses__(): a slots dataclass replaces its class, and
    # the discarded original may still be alive.
    by_type: dict[int, type[Command]] = {}
    for value in list(globals().values()):
        if isinstance(value, type) and issubclass(value, Command) and value is not Command:
            if value.TYPE in by_type:
                raise RuntimeError(f"type code {value.TYPE} used twice")
            by_type[value.TYPE] = value
    return by_type


# Every command class by its type code.
COMMANDS: Final[dict[int, type[Command]]] = _all_commands()


def _declared_segment_fields(cls: type[Command]) -> tuple[str, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple(
        field.name
        for field in dataclasses.fields(cls)  # type: ignore[arg-type]
        if Names.SEGMENT in getattr(hints[field.name], "__metadata__", ())
    )


# Every command class's fields that hold segment names (Names.SEGMENT), in wire order.
SEGMENT_FIELDS: Final[dict[type[Command], tuple[str, ...]]] = {
    cls: _declared_segment_fields(cls) for cls in COMMANDS.values()
}


def segments_named(command: Command) -> tuple[str, ...]:
    """Every segment `command` names, in wire order (a list field's items in their order); empty
    for a command that names none (Hello, KeepAlive, the append blocks: they name their writer)."""
    names: list[str] = []
    for field in SEGMENT_FIELDS[type(command)]:
        value = getattr(command, field)
        if isinstance(value, str):
            names.append(value)
        else:
            names.extend(value)
    return tuple(names)
