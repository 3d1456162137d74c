"""The wire codec: every command round-trips, hand-built frames match Pravega's layouts, short
requests from the Rust client decode with Java's defaults, and bad bytes only ever raise
MalformedCommand."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.segmentstore.wire import commands as c
from app.segmentstore.wire.codec import (
    MalformedCommand,
    check_header,
    decode,
    encode,
    encode_segment_read,
    read_command,
)
from tests.segmentstore.wire_strategies import any_command, blobs, i32s, instances

ALL_COMMANDS = sorted(c.COMMANDS.values(), key=lambda k: k.TYPE)
WRITER = 0x0123456789ABCDEF_FEDCBA9876543210
WRITER_BYTES = bytes.fromhex("0123456789abcdeffedcba9876543210")


def s(text: str) -> bytes:
    """A Java `writeUTF` string (ASCII): u16 length, then the bytes."""
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def frame(type_code: int, payload: bytes) -> bytes:
    return struct.pack(">ii", type_code, len(payload)) + payload


def test_the_command_set_is_pravegas() -> None:
    assert len(c.COMMANDS) == 70
    assert c.COMMANDS[-127] is c.Hello and c.COMMANDS[91] is c.SegmentsBatchMerged
    assert (c.WIRE_VERSION, c.OLDEST_COMPATIBLE_VERSION, c.MAX_WIRECOMMAND_SIZE) == (15, 5, 0xFFFFFF)
    assert c.NULL_ATTRIBUTE_VALUE == -(2**63)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL_COMMANDS, ids=lambda k: k.__name__)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_command_round_trips(cls: type[c.Command], data: st.DataObject) -> None:
    command = data.draw(instances(cls))
    encoded = encode(command)
    type_code, length = struct.unpack_from(">ii", encoded)
    assert (type_code, length) == (cls.TYPE, len(encoded) - 8)
    assert decode(type_code, encoded[8:]) == command


async def test_read_command_reads_frames_off_a_tcp_stream() -> None:
    sent = [
        c.Hello(15, 5),
        c.AppendBlockEnd(WRITER, 3, b"abc", 1, 9, 4),
        c.KeepAlive(),
        c.SegmentRead("s", 0, True, False, b"", 5),
    ]
    received: asyncio.Queue[c.Command | BaseException] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                received.put_nowait(await read_command(reader))
        except (asyncio.IncompleteReadError, MalformedCommand) as exc:
            received.put_nowait(exc)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        _, client = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        client.write(b"".join(encode(command) for command in sent))
        # A frame split across writes still arrives whole.
        last = encode(c.SegmentCreated(6, "x"))
        client.write(last[:5])
        await client.drain()
        client.write(last[5:])
        client.write_eof()
        got = [await received.get() for _ in range(len(sent) + 2)]
        client.close()
    finally:
        server.close()
        await server.wait_closed()
    assert got[:-1] == [*sent, c.SegmentCreated(6, "x")]
    assert isinstance(got[-1], asyncio.IncompleteReadError)


@pytest.mark.parametrize(
    "header",
    [
        struct.pack(">ii", 6, 0),  # unknown type: refused before its payload is awaited
        struct.pack(">ii", c.Hello.TYPE, -1),
        struct.pack(">ii", c.AppendBlockEnd.TYPE, 0x1000000),
    ],
)
async def test_read_command_refuses_bad_headers(header: bytes) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(header)
    with pytest.raises(MalformedCommand):
        await read_command(reader)


def test_check_header_accepts_the_largest_payload() -> None:
    check_header(c.AppendBlockEnd.TYPE, 0xFFFFFF)
    with pytest.raises(MalformedCommand):
        check_header(c.AppendBlockEnd.TYPE, 0x1000000)


# --- golden frames, built by hand from Pravega's layouts ---------------------------------------

GOLDEN: list[tuple[c.Command, bytes]] = [
    (c.Hello(15, 5), bytes.fromhex("ffffff81 00000008 0000000f 00000005")),
    (
        c.SetupAppend(7, WRITER, "sc/st/0.#epoch.0", "tok"),
        frame(1, struct.pack(">q", 7) + WRITER_BYTES + s("sc/st/0.#epoch.0") + s("tok")),
    ),
    (
        c.AppendBlockEnd(WRITER, 13, b"\0\0\0\0\0\0\0\x05hello", 1, 42, 8),
        frame(
            4,
            WRITER_BYTES
            + struct.pack(">ii", 13, 13)
            + b"\0\0\0\0\0\0\0\x05hello"
            + struct.pack(">iqq", 1, 42, 8),
        ),
    ),
    (
        c.DataAppended(WRITER, 42, 41, 8, 1013),
        frame(7, WRITER_BYTES + struct.pack(">qqqq", 42, 41, 8, 1013)),
    ),
    (
        c.SegmentRead("sc/st/0", 100, True, False, b"xyz", 9),
        frame(10, s("sc/st/0") + struct.pack(">q??i", 100, True, False, 3) + b"xyz" + struct.pack(">q", 9)),
    ),
    (
        c.UpdateTableEntries(11, "t", "", ((c.TableKey(b"key", -1), c.TableValue(b"value")),), -1),
        frame(
            74,
            struct.pack(">q", 11)
            + s("t")
            + s("")
            + struct.pack(">i", 1)
            + struct.pack(">ii", 4 + 3 + 8, 3)
            + b"key"
            + struct.pack(">q", -1)
            + struct.pack(">ii", 4 + 5, 5)
            + b"value"
            + struct.pack(">q", -1),
        ),
    ),
    (
        c.TableEntriesDeltaRead(12, "t", ((c.TableKey(b"k", 7), c.TableValue(b"")),), False, True, 99),
        frame(
            87,
            struct.pack(">q", 12)
            + s("t")
            + struct.pack(">i", 1)
            + struct.pack(">ii", 13, 1)
            + b"k"
            + struct.pack(">q", 7)
            + struct.pack(">ii", 4, 0)
            + struct.pack(">??q", False, True, 99),
        ),
    ),
    (
        # Java's layout: one count, then (source, offset) pairs.
        c.SegmentsBatchMerged(13, "sc/st/1", ("a", "bb"), (10, 20)),
        frame(
            91,
            struct.pack(">q", 13)
            + s("sc/st/1")
            + struct.pack(">i", 2)
            + s("a")
            + struct.pack(">q", 10)
            + s("bb")
            + struct.pack(">q", 20),
        ),
    ),
    (
        c.MergeSegments(14, "tgt", "src", "", (c.ConditionalAttributeUpdate(WRITER, 4, 5, -(2**63)),)),
        frame(
            58,
            struct.pack(">q", 14)
            + s("tgt")
            + s("src")
            + s("")
            + struct.pack(">i", 1)
            + WRITER_BYTES
            + struct.pack(">Bqq", 4, 5, -(2**63)),
        ),
    ),
    (
        c.ConditionalAppend(WRITER, 3, 64, c.Event(b"ev"), 15),
        frame(5, WRITER_BYTES + struct.pack(">qqii", 3, 64, 0, 2) + b"ev" + struct.pack(">q", 15)),
    ),
    (c.InvalidEventNumber(WRITER, 6, ""), frame(55, WRITER_BYTES + struct.pack(">q", 6) + s(""))),
    (c.Padding(3), frame(-1, b"\0\0\0")),
    (c.KeepAlive(), frame(100, b"")),
]


@pytest.mark.parametrize(("command", "golden"), GOLDEN, ids=lambda v: type(v).__name__)
def test_golden_frames(command: c.Command, golden: bytes) -> None:
    assert encode(command) == golden
    type_code, length = struct.unpack_from(">ii", golden)
    assert length == len(golden) - 8
    assert decode(type_code, golden[8:]) == command


# --- short requests (Rust) and other trailing fields left out ----------------------------------


def test_create_segment_without_rollover() -> None:
    payload = struct.pack(">q", 1) + s("sc/st/0") + struct.pack(">iB", 100, 1) + s("")
    assert decode(20, payload) == c.CreateSegment(1, "sc/st/0", 100, 1, "", rollover_size_bytes=0)


def test_create_table_segment_without_sorted_key_length_rollover() -> None:
    payload = struct.pack(">q", 2) + s("sc/_rg_kvtable/0.#epoch.0") + s("")
    assert decode(70, payload) == c.CreateTableSegment(2, "sc/_rg_kvtable/0.#epoch.0", "", False, 0, 0)
    # Java reads each of them when its bytes are there.
    assert decode(70, payload + b"\x01") == c.CreateTableSegment(
        2, "sc/_rg_kvtable/0.#epoch.0", "", True, 0, 0
    )
    assert decode(70, payload + b"\x01" + struct.pack(">i", 16)).key_length == 16  # type: ignore[attr-defined]


def test_merge_segments_without_attribute_updates() -> None:
    payload = struct.pack(">q", 3) + s("tgt") + s("src") + s("")
    assert decode(58, payload) == c.MergeSegments(3, "tgt", "src", "", ())


@pytest.mark.parametrize("cls", [c.ReadTableEntries, c.ReadTableKeys])
def test_read_table_iterators_with_only_the_continuation_token(cls: type[c.Command]) -> None:
    payload = struct.pack(">q", 4) + s("t") + s("") + struct.pack(">ii", 10, 2) + b"\x01\x02"
    assert decode(cls.TYPE, payload) == cls(4, "t", "", 10, b"\x01\x02", b"", b"", b"")  # type: ignore[call-arg]


def test_trailing_request_ids_and_offsets_default() -> None:
    block_end = WRITER_BYTES + struct.pack(">ii", 0, 0) + struct.pack(">iq", 1, 5)
    assert decode(4, block_end) == c.AppendBlockEnd(WRITER, 0, b"", 1, 5, -1)
    read = s("seg") + struct.pack(">qi", 0, 1024) + s("")
    assert decode(9, read) == c.ReadSegment("seg", 0, 1024, "", -1)
    appended = WRITER_BYTES + struct.pack(">q", 3)
    assert decode(7, appended) == c.DataAppended(WRITER, 3, -1, -1, -1)
    update = struct.pack(">q", 1) + s("t") + s("") + struct.pack(">i", 0)
    assert decode(74, update) == c.UpdateTableEntries(1, "t", "", (), c.NULL_TABLE_SEGMENT_OFFSET)
    no_such = struct.pack(">q", 1) + s("seg")
    assert decode(53, no_such) == c.NoSuchSegment(1, "seg", "", -1)


def test_trailing_bytes_are_ignored_as_java_does() -> None:
    assert decode(-127, struct.pack(">iii", 15, 5, 99)) == c.Hello(15, 5)


def test_encode_always_writes_the_full_layout() -> None:
    assert len(encode(c.CreateSegment(1, "s", 0, 0, ""))) == 8 + 8 + 3 + 4 + 1 + 2 + 8
    assert len(encode(c.CreateTableSegment(1, "s", ""))) == 8 + 8 + 3 + 2 + 1 + 4 + 8
    assert encode(c.ReadTableKeys(1, "s", "", 5, b"")).endswith(bytes(16))


# --- malformed input --------------------------------------------------------------------------

MALFORMED: list[tuple[str, int, bytes]] = [
    ("short payload", -127, struct.pack(">i", 15)),
    ("empty payload", 1, b""),
    ("unknown type", 6, b""),
    ("code only the Rust crate has", 72, struct.pack(">q", 1) + s("a") + s("b") + s("")),
    (
        "negative byte-array length",
        4,
        WRITER_BYTES + struct.pack(">ii", 0, -1) + struct.pack(">iqq", 1, 1, 1),
    ),
    ("byte-array length past the end", 4, WRITER_BYTES + struct.pack(">ii", 0, 100) + b"abc"),
    # With the request id optional, a short read here would otherwise pass as a shorter array.
    ("last byte array past the end", 10, s("seg") + struct.pack(">q??i", 0, False, False, 100) + b"abc"),
    ("truncated string", 11, struct.pack(">q", 1) + struct.pack(">H", 10) + b"abc"),
    ("invalid UTF-8", 11, struct.pack(">qH", 1, 2) + b"\xc0\x80" + s("")),
    ("boolean other than 0/1", 37, struct.pack(">qB", 1, 2)),
    ("negative list count", 75, struct.pack(">qi", 1, -1)),
    ("list count past the end", 75, struct.pack(">qi", 1, 2**31 - 1) + bytes(8)),
    ("empty table key", 78, struct.pack(">q", 1) + s("t") + s("") + struct.pack(">iii", 1, 12, 0) + bytes(8)),
    (
        "table key payload past the end",
        78,
        struct.pack(">q", 1) + s("t") + s("") + struct.pack(">iii", 1, 999, 1) + b"k" + bytes(8),
    ),
    ("nested event of another type", 5, WRITER_BYTES + struct.pack(">qqii", 1, 0, 3, 0) + bytes(8)),
    ("oversize payload", 3, bytes(0x1000000)),
]


@pytest.mark.parametrize(("what", "type_code", "payload"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_payloads(what: str, type_code: int, payload: bytes) -> None:
    with pytest.raises(MalformedCommand):
        decode(type_code, payload)


@pytest.mark.parametrize(
    "command",
    [
        c.ReadTable(1, "t", "", (c.TableKey(b"", -1),)),  # Java and Rust disagree on its layout
        c.SegmentCreated(1, "x" * 70000),  # longer than a u16 length allows
        c.SegmentsBatchMerged(1, "t", ("a",), ()),
        c.SetupAppend(1, -1, "s", ""),  # writer ids are unsigned
        c.SetupAppend(1, 2**128, "s", ""),
        c.Hello(2**31, 5),
        c.CreateSegment(1, "s", 0, 256, ""),
        c.AppendBlockEnd(WRITER, 0, bytes(0xFFFFFF), 1, 1, 1),  # the frame would be too large
    ],
    ids=lambda command: type(command).__name__,
)
def test_encode_refuses_what_cannot_travel(command: c.Command) -> None:
    with pytest.raises(MalformedCommand):
        encode(command)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    pieces=st.lists(
        st.one_of(st.binary(min_size=1, max_size=40), st.integers(1, 200_000).map(lambda n: b"p" * n)),
        max_size=6,
    ),
    at_tail=st.booleans(),
    request_id=st.integers(-(2**63), 2**63 - 1),
)
def test_a_segment_read_sent_in_pieces_is_the_frame_of_its_joined_data(
    pieces: list[bytes], at_tail: bool, request_id: int
) -> None:
    head = c.SegmentRead("sc/st/0.#epoch.0", 1 << 40, at_tail, not at_tail, b"", request_id)
    frames = encode_segment_read(head, pieces)
    joined = b"".join(pieces)
    assert b"".join(frames) == encode(
        c.SegmentRead(head.segment, head.offset, at_tail, not at_tail, joined, request_id)
    )
    if len(joined) >= 64 * 1024:
        # Large data travels in the pieces themselves, not copied into a frame.
        assert all(any(frame is piece for frame in frames) for piece in pieces)


def test_a_segment_read_in_pieces_refuses_what_cannot_travel() -> None:
    head = c.SegmentRead("s", 0, True, False, b"", 1)
    with pytest.raises(MalformedCommand):
        encode_segment_read(head, [bytes(0xFFFFFF)])
    with pytest.raises(MalformedCommand):
        encode_segment_read(c.SegmentRead("s", 0, True, False, b"x", 1), [b"y"])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(type_code=st.one_of(st.sampled_from(sorted(c.COMMANDS)), i32s), payload=st.binary(max_size=80))
def test_random_bytes_decode_or_raise_malformed(type_code: int, payload: bytes) -> None:
    with contextlib.suppress(MalformedCommand):
        assert isinstance(decode(type_code, payload), c.Command)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    command=any_command,
    cut=st.integers(0, 200),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
    extra=blobs,
)
def test_damaged_frames_decode_or_raise_malformed(
    command: c.Command, cut: int, flips: list[tuple[int, int]], extra: bytes
) -> None:
    payload = bytearray(encode(command)[8:])
    for at, value in flips:
        if payload:
            payload[at % len(payload)] = value
    damaged = bytes(payload[: len(payload) - cut % (len(payload) + 1)]) + extra[: cut % 3]
    with contextlib.suppress(MalformedCommand):
        assert isinstance(decode(command.TYPE, damaged), type(command))
