"""Pravega's revisioned Watermark serialization and the Event framing of `_MARK` entries: bytes laid
out by hand from Java's VersionedSerializer / RevisionDataOutputStream / Watermark, round trips, a
newer writer's additions skipped, and malformed input refused."""

from __future__ import annotations

import struct

import pytest

from app.domain.watermarks import NO_TIME, MarkEntry, SegmentRange, Watermark
from app.segmentstore.watermark_codec import (
    MalformedWatermark,
    decode_entries,
    deserialize_watermark,
    frame_event,
    serialize_watermark,
    split_events,
)

# Java's WatermarkSerializerTest watermark: [0, 1] with {(0, [0.0, 0.5)): 1, (1, [0.5, 1.0)): 1}.
JAVA_TEST_WATERMARK = Watermark(0, 1, {SegmentRange(0, 0.0, 0.5): 1, SegmentRange(1, 0.5, 1.0): 1})
JAVA_TEST_BYTES = bytes.fromhex(
    # format 0, version 0, 1 revision, revision 0, its length (97)
    "00 00 01 00 00000061"
    # lowerTimeBound, upperTimeBound
    "0000000000000000 0000000000000001"
    # the stream cut: compact-int count 2
    "02"
    # SegmentWithRange 0 in its own header (length 24): id, rangeLow 0.0, rangeHigh 0.5; offset 1
    "00 00 01 00 00000018 0000000000000000 0000000000000000 3fe0000000000000"
    "0000000000000001"
    # SegmentWithRange 1: id, 0.5, 1.0; offset 1
    "00 00 01 00 00000018 0000000000000001 3fe0000000000000 3ff0000000000000"
    "0000000000000001"
)


def cut_ids(watermark: Watermark) -> dict[int, tuple[float, float, int]]:
    return {s.segment: (s.low, s.high, offset) for s, offset in watermark.stream_cut.items()}


def same(a: Watermark, b: Watermark) -> bool:
    return (a.lower_time_bound, a.upper_time_bound, cut_ids(a)) == (
        b.lower_time_bound,
        b.upper_time_bound,
        cut_ids(b),
    )


def test_java_layout_byte_for_byte() -> None:
    assert serialize_watermark(JAVA_TEST_WATERMARK) == JAVA_TEST_BYTES
    assert same(deserialize_watermark(JAVA_TEST_BYTES), JAVA_TEST_WATERMARK)


def test_the_cut_is_written_in_segment_id_order() -> None:
    backwards = Watermark(0, 1, {SegmentRange(1, 0.5, 1.0): 1, SegmentRange(0, 0.0, 0.5): 1})
    assert serialize_watermark(backwards) == JAVA_TEST_BYTES


@pytest.mark.parametrize(
    "count, prefix",
    [(0, "00"), (127, "7f"), (128, "8080"), (0x3FFF, "bfff"), (0x4000, "c0004000")],
)
def test_compact_int_counts(count: int, prefix: str) -> None:
    step = 1.0 / max(count, 1)
    cut = {SegmentRange(i, i * step, (i + 1) * step if i + 1 < count else 1.0): i for i in range(count)}
    data = serialize_watermark(Watermark(5, 7, cut))
    assert data[24 : 24 + len(prefix) // 2] == bytes.fromhex(prefix)
    back = deserialize_watermark(data)
    assert back.lower_time_bound == 5 and back.upper_time_bound == 7
    assert cut_ids(back) == cut_ids(Watermark(5, 7, cut))
    (length,) = struct.unpack(">i", data[4:8])
    assert length == len(data) - 8


def test_round_trips_extremes() -> None:
    big = SegmentRange((7 << 32) + 3, 0.25, 0.9999999999999999)
    for watermark in (
        Watermark(NO_TIME, NO_TIME, {}),
        Watermark(-5, 2**63 - 1, {big: 2**63 - 1}),
        Watermark(1_700_000_000_000, 1_700_000_000_999, {SegmentRange(0, 0.0, 1.0): 0}),
    ):
        assert same(deserialize_watermark(serialize_watermark(watermark)), watermark)


def test_a_newer_writers_fields_and_revisions_are_skipped() -> None:
    # Revision 0 with 3 extra bytes at its end, then a revision 1 this reader does not know.
    body = JAVA_TEST_BYTES[8:] + b"xyz"
    newer = (
        bytes([0, 0, 2, 0]) + struct.pack(">i", len(body)) + body + bytes([1]) + struct.pack(">i", 2) + b"ab"
    )
    assert same(deserialize_watermark(newer), JAVA_TEST_WATERMARK)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "needs 1 bytes"),
        (JAVA_TEST_BYTES[:-1], "needs 97 bytes at 8, 96 left"),
        (b"\x01" + JAVA_TEST_BYTES[1:], "format 1"),
        (JAVA_TEST_BYTES[:1] + b"\x01" + JAVA_TEST_BYTES[2:], "version 1"),
        (JAVA_TEST_BYTES[:2] + b"\x00" + JAVA_TEST_BYTES[3:], "0 revisions"),
        (JAVA_TEST_BYTES[:3] + b"\x01" + JAVA_TEST_BYTES[4:], "revision 1 where 0"),
        (JAVA_TEST_BYTES[:4] + struct.pack(">i", 10_000) + JAVA_TEST_BYTES[8:], "needs 10000 bytes"),
        (JAVA_TEST_BYTES[:4] + struct.pack(">i", -1) + JAVA_TEST_BYTES[8:], "needs -1 bytes"),
        # upper below lower
        (JAVA_TEST_BYTES[:8] + struct.pack(">qq", 5, 4) + JAVA_TEST_BYTES[24:], "below lower"),
        # a segment whose range is empty (rangeHigh 0.0)
        (JAVA_TEST_BYTES[:-16] + bytes(8) + JAVA_TEST_BYTES[-8:], "has range"),
    ],
)
def test_malformed_bytes_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(MalformedWatermark, match=message):
        deserialize_watermark(data)


def test_unwritable_watermarks_are_refused() -> None:
    with pytest.raises(MalformedWatermark, match="upper time bound"):
        serialize_watermark(Watermark(2, 1, {}))
    with pytest.raises(MalformedWatermark, match="cannot be written"):
        serialize_watermark(Watermark(1, 2, {SegmentRange(0, 0.5, 0.5): 0}))
    with pytest.raises(MalformedWatermark, match="Java long"):
        serialize_watermark(Watermark(1, 2**63, {}))


def test_events_frame_and_split() -> None:
    first, second = serialize_watermark(JAVA_TEST_WATERMARK), serialize_watermark(Watermark(2, 3, {}))
    data = frame_event(first) + frame_event(second)
    assert data[:8] == struct.pack(">ii", 0, len(first))
    entries = decode_entries(data, 1000)
    assert [(e.start, e.end) for e in entries] == [
        (1000, 1008 + len(first)),
        (1008 + len(first), 1000 + len(data)),
    ]
    assert same(entries[0].watermark, JAVA_TEST_WATERMARK)
    assert isinstance(entries[1], MarkEntry) and entries[1].watermark.lower_time_bound == 2
    # A partial Event is left for a later read by split_events and refused by decode_entries.
    events, rest = split_events(data[:-1], 0)
    assert len(events) == 1 and rest == 8 + len(first)
    with pytest.raises(MalformedWatermark, match="partial Event"):
        decode_entries(data[:-1], 0)
    with pytest.raises(MalformedWatermark, match="not an Event"):
        decode_entries(struct.pack(">ii", 5, 0), 0)
    with pytest.raises(MalformedWatermark, match="Event at offset 0"):
        decode_entries(frame_event(b"\x00\x00"), 0)
