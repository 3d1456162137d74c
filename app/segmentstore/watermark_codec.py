"""Pravega's `Watermark` in its revisioned serialization (VersionedSerializer.WithBuilder), and the
Event framing a RevisionedStreamClient puts around each entry of a `_MARK<stream>` segment.

Invariant: what `serialize_watermark` writes, Pravega's WatermarkSerializer reads, byte for byte
the layout Java writes (stream-cut entries in segment-id order, which Java's map leaves open);
`deserialize_watermark` reads Java's bytes, skipping the fields and revisions a later format
version may add, and refuses anything malformed with `MalformedWatermark`, never a crash.
"""

from __future__ import annotations

import struct
from typing import Final

from app.domain.watermarks import MarkEntry, SegmentRange, Watermark

# VersionedSerializer: [format 0][version][revision count] then per revision
# [revision id][i32 length][fields]. Watermark and SegmentWithRange both write version 0 with one
# revision, 0.
_SERIALIZER_FORMAT: Final = 0
_WRITE_VERSION: Final = 0
_REVISION: Final = 0
_HEADER: Final = struct.Struct(">BBBBi")
_BOUNDS: Final = struct.Struct(">qq")
_SEGMENT_FIELDS: Final = struct.Struct(">qdd")
_OFFSET: Final = struct.Struct(">q")
_I32: Final = struct.Struct(">i")

# Every entry of a revisioned segment is an Event: [i32 type 0][i32 payload length][payload]
# (WireCommands.TYPE_PLUS_LENGTH_SIZE is the 8).
EVENT_TYPE: Final = 0
EVENT_HEADER: Final = struct.Struct(">ii")
EVENT_HEADER_BYTES: Final = EVENT_HEADER.size

_COMPACT_INT_MAX: Final = (1 << 30) - 1
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


class MalformedWatermark(ValueError):
    """Bytes that are not a Watermark (or an Event holding one) in Pravega's format."""


# --- writing ---------------------------------------------------------------------------------------


def serialize_watermark(watermark: Watermark) -> bytes:
    """Watermark.toByteBuf: the bounds, then the stream cut as a compact-int count of
    (SegmentWithRange, i64 offset) pairs, each SegmentWithRange serialized whole in its own header."""
    _check_long("lowerTimeBound", watermark.lower_time_bound)
    _check_long("upperTimeBound", watermark.upper_time_bound)
    if watermark.upper_time_bound < watermark.lower_time_bound:
        raise MalformedWatermark("a watermark's upper time bound may not be below its lower one")
    fields = bytearray(_BOUNDS.pack(watermark.lower_time_bound, watermark.upper_time_bound))
    entries = sorted(watermark.stream_cut.items(), key=lambda e: e[0].segment)
    fields += _compact_int(len(entries))
    for segment, offset in entries:
        _check_long("offset", offset)
        fields += _serialize_segment(segment)
        fields += _OFFSET.pack(offset)
    return _revisioned(bytes(fields))


def frame_event(payload: bytes) -> bytes:
    """The Event a ConditionalAppend carries, as the segment stores it."""
    return EVENT_HEADER.pack(EVENT_TYPE, len(payload)) + payload


def _serialize_segment(segment: SegmentRange) -> bytes:
    # SegmentWithRange's own preconditions: Java refuses to build anything else.
    if segment.segment < 0 or not (0.0 <= segment.low < segment.high <= 1.0):
        raise MalformedWatermark(
            f"segment {segment.segment} [{segment.low}, {segment.high}) cannot be written"
        )
    return _revisioned(_SEGMENT_FIELDS.pack(segment.segment, segment.low, segment.high))


def _revisioned(fields: bytes) -> bytes:
    return _HEADER.pack(_SERIALIZER_FORMAT, _WRITE_VERSION, 1, _REVISION, len(fields)) + fields


def _compact_int(value: int) -> bytes:
    if not 0 <= value <= _COMPACT_INT_MAX:
        raise MalformedWatermark(f"{value} is beyond a compact int")
    if value > 0x3FFF:
        return struct.pack(">I", value | 0xC000_0000)
    if value > 0x7F:
        return struct.pack(">H", value | 0x8000)
    return bytes([value])


def _check_long(field: str, value: int) -> None:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise MalformedWatermark(f"{field} {value} does not fit a Java long")


# --- reading ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self._data = memoryview(data)
        self._at = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._data) - self._at

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.remaining:
            raise MalformedWatermark(f"{self._what}: needs {n} bytes at {self._at}, {self.remaining} left")
        out = self._data[self._at : self._at + n]
        self._at += n
        return out

    def byte(self) -> int:
        return self.take(1)[0]

    def unpack(self, layout: struct.Struct) -> tuple[int | float, ...]:
        values: tuple[int | float, ...] = layout.unpack(self.take(layout.size))
        return values

    def compact_int(self) -> int:
        first = self.byte()
        if first >> 7 == 0:
            return first
        if (first >> 6) & 1 == 0:
            return ((first & 0x3F) << 8) | self.byte()
        rest = self.take(3)
        return ((first & 0x3F) << 24) | (rest[0] << 16) | (rest[1] << 8) | rest[2]


def _known_revision(reader: _Reader, what: str) -> _Reader:
    """Reads a whole VersionedSerializer record from `reader` and returns revision 0's fields;
    later revisions (a newer writer's additions) are skipped by their lengths."""
    form = reader.byte()
    if form != _SERIALIZER_FORMAT:
        raise MalformedWatermark(f"{what}: unsupported serialization format {form}")
    version = reader.byte()
    if version != _WRITE_VERSION:
        raise MalformedWatermark(f"{what}: unsupported version {version}")
    count = reader.byte()
    if count == 0 or count > 127:
        raise MalformedWatermark(f"{what}: {count} revisions")
    first: _Reader | None = None
    for index in range(count):
        revision = reader.byte()
        if revision != index:
            raise MalformedWatermark(f"{what}: revision {revision} where {index} was expected")
        (length,) = reader.unpack(_I32)
        body = reader.take(int(length))
        if index == _REVISION:
            first = _Reader(body, what)
    assert first is not None
    return first


def deserialize_watermark(data: bytes | memoryview) -> Watermark:
    """Watermark.fromByteBuf."""
    fields = _known_revision(_Reader(data, "watermark"), "watermark")
    low, high = (int(v) for v in fields.unpack(_BOUNDS))
    if high < low:
        raise MalformedWatermark(f"watermark: upper time bound {high} below lower {low}")
    count = fields.compact_int()
    cut: dict[SegmentRange, int] = {}
    for _ in range(count):
        segment_fields = _known_revision(fields, "segment with range")
        segment_id, range_low, range_high = segment_fields.unpack(_SEGMENT_FIELDS)
        segment = SegmentRange(int(segment_id), float(range_low), float(range_high))
        if segment.segment < 0 or not (0.0 <= segment.low < segment.high <= 1.0):
            raise MalformedWatermark(
                f"watermark: segment {segment.segment} has range [{range_low}, {range_high})"
            )
        (offset,) = fields.unpack(_OFFSET)
        cut[segment] = int(offset)
    return Watermark(low, high, cut)


def split_events(data: bytes | memoryview, base_offset: int) -> tuple[list[tuple[int, int, memoryview]], int]:
    """The whole Events in `data` (which starts at segment offset `base_offset` on an Event's
    boundary) as (start, end, payload), and the offset where the unread rest begins (a partial
    Event at the end of `data`, to be read again with more bytes)."""
    view = memoryview(data)
    at = 0
    events: list[tuple[int, int, memoryview]] = []
    while len(view) - at >= EVENT_HEADER_BYTES:
        kind, length = EVENT_HEADER.unpack(view[at : at + EVENT_HEADER_BYTES])
        if kind != EVENT_TYPE or length < 0:
            raise MalformedWatermark(
                f"offset {base_offset + at}: not an Event (type {kind}, length {length})"
            )
        end = at + EVENT_HEADER_BYTES + length
        if end > len(view):
            break
        events.append((base_offset + at, base_offset + end, view[at + EVENT_HEADER_BYTES : end]))
        at = end
    return events, base_offset + at


def decode_entries(data: bytes | memoryview, base_offset: int) -> list[MarkEntry]:
    """Every Event of `data` (starting at segment offset `base_offset`, on an Event's boundary)
    decoded as a watermark; `data` must end on a boundary too."""
    events, rest = split_events(data, base_offset)
    if rest != base_offset + len(data):
        raise MalformedWatermark(f"a partial Event at offset {rest}")
    entries: list[MarkEntry] = []
    for start, end, payload in events:
        try:
            entries.append(MarkEntry(start, end, deserialize_watermark(payload)))
        except MalformedWatermark as exc:
            raise MalformedWatermark(f"the Event at offset {start}: {exc}") from exc
    return entries
