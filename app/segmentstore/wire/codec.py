"""Frames (`[i32 type][i32 length][payload]`, big-endian) to commands and back. Invariant: decoding
untrusted bytes returns a command or raises MalformedCommand, nothing else; layouts are derived
once from the annotations in `commands.py`, so encoder and decoder cannot disagree on a field.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import typing
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final

from app.segmentstore.wire.commands import (
    COMMANDS,
    MAX_WIRECOMMAND_SIZE,
    AppendBlock,
    AppendBlockEnd,
    ChunkInfo,
    Command,
    ConditionalAttributeUpdate,
    Event,
    Padding,
    PartialEvent,
    SegmentRead,
    TableKey,
    TableValue,
    Wire,
)

HEADER_SIZE: Final = 8


class MalformedCommand(ValueError):
    """The bytes are not a valid command (Java closes the connection on these)."""


_HEADER = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_TWO_I32 = struct.Struct(">ii")
_U64_MASK = (1 << 64) - 1

# A decode step reads one field (or a run of fixed-size fields) at `pos` of the payload, appends
# the value(s) to `out` and returns the position after them.
_DecodeStep = Callable[[bytes, int, list[Any]], int]
# An encode step appends the bytes of one field (or run of fields) of `command` to `parts`;
# a value encoder does the same for one field's value.
_EncodeStep = Callable[[Any, list[bytes]], None]
_EncodeValue = Callable[[Any, list[bytes]], None]

_FIXED_FORMAT: Final = {Wire.I32: "i", Wire.I64: "q", Wire.U8: "B", Wire.BOOL: "B", Wire.U128: "QQ"}
_FIXED_SIZE: Final = {kind: struct.calcsize(">" + fmt) for kind, fmt in _FIXED_FORMAT.items()}


# --- reading primitives -----------------------------------------------------------------------


def _read_len(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0 or n > len(buf) - pos:
        raise MalformedCommand(f"{what} length {n} with {len(buf) - pos} bytes left")
    return n, pos


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    end = pos + n
    if end > len(buf):
        raise MalformedCommand(f"string of {n} bytes with {len(buf) - pos} left")
    return buf[pos:end].decode("utf-8"), end


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _read_len(buf, pos, "byte array")
    return buf[pos : pos + n], pos + n


def _read_count(buf: bytes, pos: int, min_item_size: int) -> tuple[int, int]:
    # Bounding the count by the bytes left keeps a forged count from driving a huge loop.
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0 or n * min_item_size > len(buf) - pos:
        raise MalformedCommand(f"list of {n} items with {len(buf) - pos} bytes left")
    return n, pos


def _read_table_key(buf: bytes, pos: int) -> tuple[TableKey, int]:
    payload, n = _TWO_I32.unpack_from(buf, pos)
    if payload < 0 or payload > len(buf) - pos - 4:
        raise MalformedCommand(f"table key payload {payload} with {len(buf) - pos - 4} bytes left")
    if n == 0:
        # Java writes no version after an empty key, Rust does: the two disagree, refuse it.
        raise MalformedCommand("empty table key")
    data, pos = _read_bytes(buf, pos + 4)
    (version,) = _I64.unpack_from(buf, pos)
    return TableKey(data, version), pos + 8


def _read_table_value(buf: bytes, pos: int) -> tuple[TableValue, int]:
    (payload,) = _I32.unpack_from(buf, pos)
    if payload < 0 or payload > len(buf) - pos - 4:
        raise MalformedCommand(f"table value payload {payload} with {len(buf) - pos - 4} bytes left")
    data, pos = _read_bytes(buf, pos + 4)
    return TableValue(data), pos


# --- writing primitives -----------------------------------------------------------------------


def _str_parts(value: str) -> tuple[bytes, bytes]:
    raw = value.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise MalformedCommand(f"string of {len(raw)} bytes does not fit a u16 length")
    return _U16.pack(len(raw)), raw


def _table_key_parts(key: TableKey, parts: list[bytes]) -> None:
    if not key.data:
        raise MalformedCommand("empty table key")
    parts.append(_TWO_I32.pack(4 + len(key.data) + 8, len(key.data)))
    parts.append(key.data)
    parts.append(_I64.pack(key.key_version))


def _table_value_parts(value: TableValue, parts: list[bytes]) -> None:
    parts.append(_TWO_I32.pack(4 + len(value.data), len(value.data)))
    parts.append(value.data)


# --- plans ------------------------------------------------------------------------------------


def _wire_fields(cls: type) -> list[tuple[dataclasses.Field[Any], Wire]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    result = []
    for field in dataclasses.fields(cls):
        metadata = [m for m in getattr(hints[field.name], "__metadata__", ()) if isinstance(m, Wire)]
        if len(metadata) != 1:
            raise TypeError(f"{cls.__name__}.{field.name} has no wire encoding")
        result.append((field, metadata[0]))
    return result


def _fixed_decoder(kinds: list[Wire]) -> _DecodeStep:
    layout = struct.Struct(">" + "".join(_FIXED_FORMAT[k] for k in kinds))
    unpack, size = layout.unpack_from, layout.size
    if all(k in (Wire.I32, Wire.I64, Wire.U8) for k in kinds):

        def plain(buf: bytes, pos: int, out: list[Any]) -> int:
            out.extend(unpack(buf, pos))
            return pos + size

        return plain

    def converted(buf: bytes, pos: int, out: list[Any]) -> int:
        raw = unpack(buf, pos)
        i = 0
        for kind in kinds:
            if kind is Wire.U128:
                out.append(raw[i] << 64 | raw[i + 1])
                i += 2
                continue
            value = raw[i]
            i += 1
            if kind is Wire.BOOL:
                if value > 1:
                    raise MalformedCommand(f"boolean byte {value}")
                out.append(value == 1)
            else:
                out.append(value)
        return pos + size

    return converted


def _fixed_encoder(names: list[str], kinds: list[Wire]) -> _EncodeStep:
    pack = struct.Struct(">" + "".join(_FIXED_FORMAT[k] for k in kinds)).pack
    getters = [attrgetter(name) for name in names]
    if all(k in (Wire.I32, Wire.I64, Wire.U8) for k in kinds):

        def plain(command: Any, parts: list[bytes]) -> None:
            parts.append(pack(*[get(command) for get in getters]))

        return plain

    pairs = list(zip(getters, kinds, strict=True))

    def converted(command: Any, parts: list[bytes]) -> None:
        values: list[int] = []
        for get, kind in pairs:
            value = get(command)
            if kind is Wire.U128:
                values.append(value >> 64)
                values.append(value & _U64_MASK)  # a negative id fails on the high half
            elif kind is Wire.BOOL:
                values.append(1 if value else 0)
            else:
                values.append(value)
        parts.append(pack(*values))

    return converted


def _fixed_value_encoder(kind: Wire) -> _EncodeValue:
    pack = struct.Struct(">" + _FIXED_FORMAT[kind]).pack
    if kind is Wire.U128:
        return lambda value, parts: parts.append(pack(value >> 64, value & _U64_MASK))
    if kind is Wire.BOOL:
        return lambda value, parts: parts.append(pack(1 if value else 0))
    return lambda value, parts: parts.append(pack(value))


def _struct_list(cls: type) -> tuple[_DecodeStep, _EncodeValue]:
    plan = _Plan(cls)
    min_size = max(1, plan.min_size)

    def decode_list(buf: bytes, pos: int, out: list[Any]) -> int:
        n, pos = _read_count(buf, pos, min_size)
        items = []
        for _ in range(n):
            item, pos = plan.decode_at(buf, pos)
            items.append(item)
        out.append(tuple(items))
        return pos

    def encode_list(items: Any, parts: list[bytes]) -> None:
        parts.append(_I32.pack(len(items)))
        for item in items:
            plan.encode_into(item, parts)

    return decode_list, encode_list


# --- variable-size kinds: one decoder and one value encoder each ------------------------------


def _dec_str(buf: bytes, pos: int, out: list[Any]) -> int:
    value, pos = _read_str(buf, pos)
    out.append(value)
    return pos


def _enc_str(value: str, parts: list[bytes]) -> None:
    parts.extend(_str_parts(value))


def _dec_bytes(buf: bytes, pos: int, out: list[Any]) -> int:
    n, pos = _read_len(buf, pos, "byte array")
    out.append(buf[pos : pos + n])
    return pos + n


def _enc_bytes(data: bytes, parts: list[bytes]) -> None:
    parts.append(_I32.pack(len(data)))
    parts.append(data)


def _dec_rest(buf: bytes, pos: int, out: list[Any]) -> int:
    out.append(buf[pos:])
    return len(buf)


def _enc_rest(data: bytes, parts: list[bytes]) -> None:
    parts.append(data)


def _dec_padding(buf: bytes, pos: int, out: list[Any]) -> int:
    # Java skips the filler without looking at it.
    out.append(len(buf) - pos)
    return len(buf)


def _enc_padding(length: int, parts: list[bytes]) -> None:
    if length < 0:
        raise MalformedCommand(f"padding of {length} bytes")
    parts.append(bytes(length))


def _dec_event(buf: bytes, pos: int, out: list[Any]) -> int:
    (type_code,) = _I32.unpack_from(buf, pos)
    if type_code != Event.TYPE:
        raise MalformedCommand(f"expected an event, found type {type_code}")
    data, pos = _read_bytes(buf, pos + 4)
    out.append(Event(data))
    return pos


def _enc_event(event: Event, parts: list[bytes]) -> None:
    parts.append(_TWO_I32.pack(Event.TYPE, len(event.data)))
    parts.append(event.data)


def _dec_strs(buf: bytes, pos: int, out: list[Any]) -> int:
    n, pos = _read_count(buf, pos, 2)
    items = []
    for _ in range(n):
        value, pos = _read_str(buf, pos)
        items.append(value)
    out.append(tuple(items))
    return pos


def _enc_strs(items: tuple[str, ...], parts: list[bytes]) -> None:
    parts.append(_I32.pack(len(items)))
    for item in items:
        parts.extend(_str_parts(item))


def _dec_i64s(buf: bytes, pos: int, out: list[Any]) -> int:
    n, pos = _read_count(buf, pos, 8)
    out.append(struct.unpack_from(f">{n}q", buf, pos))
    return pos + 8 * n


def _enc_i64s(items: tuple[int, ...], parts: list[bytes]) -> None:
    parts.append(struct.pack(f">i{len(items)}q", len(items), *items))


def _dec_table_keys(buf: bytes, pos: int, out: list[Any]) -> int:
    n, pos = _read_count(buf, pos, 17)
    items = []
    for _ in range(n):
        key, pos = _read_table_key(buf, pos)
        items.append(key)
    out.append(tuple(items))
    return pos


def _enc_table_keys(items: tuple[TableKey, ...], parts: list[bytes]) -> None:
    parts.append(_I32.pack(len(items)))
    for key in items:
        _table_key_parts(key, parts)


def _dec_table_entries(buf: bytes, pos: int, out: list[Any]) -> int:
    n, pos = _read_count(buf, pos, 25)
    items = []
    for _ in range(n):
        key, pos = _read_table_key(buf, pos)
        value, pos = _read_table_value(buf, pos)
        items.append((key, value))
    out.append(tuple(items))
    return pos


def _enc_table_entries(items: tuple[tuple[TableKey, TableValue], ...], parts: list[bytes]) -> None:
    parts.append(_I32.pack(len(items)))
    for key, value in items:
        _table_key_parts(key, parts)
        _table_value_parts(value, parts)


def _dec_merged(buf: bytes, pos: int, out: list[Any]) -> int:
    # Fills both SegmentsBatchMerged lists from Java's (source, offset) pairs.
    n, pos = _read_count(buf, pos, 10)
    sources, offsets = [], []
    for _ in range(n):
        source, pos = _read_str(buf, pos)
        (offset,) = _I64.unpack_from(buf, pos)
        pos += 8
        sources.append(source)
        offsets.append(offset)
    out.append(tuple(sources))
    out.append(tuple(offsets))
    return pos


def _enc_merged(command: Any, parts: list[bytes]) -> None:
    sources, offsets = command.sources, command.new_target_write_offsets
    if len(sources) != len(offsets):
        raise MalformedCommand(f"{len(sources)} sources but {len(offsets)} offsets")
    parts.append(_I32.pack(len(sources)))
    for source, offset in zip(sources, offsets, strict=True):
        parts.extend(_str_parts(source))
        parts.append(_I64.pack(offset))


def _skip(buf: bytes, pos: int, out: list[Any]) -> int:
    return pos  # the offsets of SegmentsBatchMerged: read with the sources


def _enc_nothing(value: Any, parts: list[bytes]) -> None:
    """The offsets of SegmentsBatchMerged: written with the sources."""


_VARIABLE: Final[dict[Wire, tuple[_DecodeStep, _EncodeValue]]] = {
    Wire.STR: (_dec_str, _enc_str),
    Wire.BYTES: (_dec_bytes, _enc_bytes),
    Wire.REST: (_dec_rest, _enc_rest),
    Wire.PADDING: (_dec_padding, _enc_padding),
    Wire.EVENT: (_dec_event, _enc_event),
    Wire.STRS: (_dec_strs, _enc_strs),
    Wire.I64S: (_dec_i64s, _enc_i64s),
    Wire.TABLE_KEYS: (_dec_table_keys, _enc_table_keys),
    Wire.TABLE_ENTRIES: (_dec_table_entries, _enc_table_entries),
    Wire.MERGED_SOURCES: (_dec_merged, _enc_nothing),  # the encoder takes the whole command
    Wire.MERGED_OFFSETS: (_skip, _enc_nothing),
}


def _encode_step(name: str, kind: Wire, encode_value: _EncodeValue) -> _EncodeStep:
    if kind is Wire.MERGED_SOURCES:
        return _enc_merged
    get = attrgetter(name)
    return lambda command, parts: encode_value(get(command), parts)


def _optional(step: _DecodeStep, kind: Wire, default: Any) -> _DecodeStep:
    # A trailing field an older or Rust peer may omit: like Java, a fixed-size field is read only
    # when all its bytes are there, a byte array when its length is, anything else when any byte is.
    needed = _FIXED_SIZE.get(kind, 4 if kind is Wire.BYTES else 1)

    def maybe(buf: bytes, pos: int, out: list[Any]) -> int:
        if len(buf) - pos < needed:
            out.append(default)
            return pos
        return step(buf, pos, out)

    return maybe


class _Plan:
    """The decode and encode steps of one dataclass, consecutive fixed-size fields merged."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.decode_steps: list[_DecodeStep] = []
        self.encode_steps: list[_EncodeStep] = []
        self.min_size = 0
        run_names: list[str] = []
        run_kinds: list[Wire] = []

        def flush() -> None:
            if run_kinds:
                self.decode_steps.append(_fixed_decoder(list(run_kinds)))
                self.encode_steps.append(_fixed_encoder(list(run_names), list(run_kinds)))
                run_names.clear()
                run_kinds.clear()

        for field, kind in _wire_fields(cls):
            has_default = field.default is not dataclasses.MISSING
            if kind in _FIXED_FORMAT and not has_default:
                run_names.append(field.name)
                run_kinds.append(kind)
                self.min_size += _FIXED_SIZE[kind]
                continue
            flush()
            step, encode_value = self._variable(kind)
            if has_default:
                step = _optional(step, kind, field.default)
            elif kind in (Wire.STR, Wire.BYTES, Wire.EVENT):
                self.min_size += 2 if kind is Wire.STR else 4
            self.decode_steps.append(step)
            self.encode_steps.append(_encode_step(field.name, kind, encode_value))
        flush()

    @staticmethod
    def _variable(kind: Wire) -> tuple[_DecodeStep, _EncodeValue]:
        if kind in _FIXED_FORMAT:  # a trailing optional fixed-size field travels alone
            return _fixed_decoder([kind]), _fixed_value_encoder(kind)
        if kind is Wire.ATTRIBUTE_UPDATES:
            return _struct_list(ConditionalAttributeUpdate)
        if kind is Wire.CHUNKS:
            return _struct_list(ChunkInfo)
        return _VARIABLE[kind]

    def decode_at(self, buf: bytes, pos: int) -> tuple[Any, int]:
        out: list[Any] = []
        for step in self.decode_steps:
            pos = step(buf, pos, out)
        return self.cls(*out), pos

    def encode_into(self, value: Any, parts: list[bytes]) -> None:
        for step in self.encode_steps:
            step(value, parts)


_PLANS: Final[dict[int, _Plan]] = {code: _Plan(cls) for code, cls in COMMANDS.items()}
# What an unexpected byte pattern can make the primitives raise; all of it means "malformed".
_DECODE_ERRORS: Final = (struct.error, ValueError, OverflowError)


# --- public API -------------------------------------------------------------------------------


def encode(command: Command) -> bytes:
    """The whole frame, header included; always the full layout, optional fields too."""
    plan = _PLANS.get(command.TYPE)
    if plan is None or not isinstance(command, plan.cls):
        raise MalformedCommand(f"not a wire command: {command!r}")
    parts: list[bytes] = [b""]
    try:
        plan.encode_into(command, parts)
    except MalformedCommand:
        raise
    except (struct.error, ValueError, OverflowError, TypeError, AttributeError) as exc:
        raise MalformedCommand(f"cannot encode {type(command).__name__}: {exc}") from exc
    length = sum(map(len, parts))
    if length > MAX_WIRECOMMAND_SIZE:
        raise MalformedCommand(f"{type(command).__name__} payload of {length} bytes is too large")
    parts[0] = _HEADER.pack(command.TYPE, length)
    return b"".join(parts)


# Below this, a SegmentRead's frame is one buffer (one send); above, its data pieces go as they are.
_JOIN_BELOW_BYTES: Final = 64 * 1024


def encode_segment_read(reply: SegmentRead, pieces: Sequence[bytes]) -> list[bytes]:
    """The frame of `reply` (its data empty) carrying `pieces` joined as its data, as buffers to
    write in order. A large read's pieces are not copied into a frame: a 2 MiB reply joined once
    by the storage and once here cost as much of serve's CPU as the database's whole read."""
    if reply.data:
        raise MalformedCommand("the reply's data goes in its pieces")
    empty = encode(reply)
    size = sum(map(len, pieces))
    payload = len(empty) - HEADER_SIZE + size
    if payload > MAX_WIRECOMMAND_SIZE:
        raise MalformedCommand(f"SegmentRead payload of {payload} bytes is too large")
    # SegmentRead ends with its data (an i32 length, the bytes) and the request id (an i64).
    fields, request_id = empty[HEADER_SIZE:-12], empty[-8:]
    head = _HEADER.pack(SegmentRead.TYPE, payload) + fields + _I32.pack(size)
    if size < _JOIN_BELOW_BYTES:
        return [b"".join((head, *pieces, request_id))]
    return [head, *pieces, request_id]


def decode(type_code: int, payload: bytes) -> Command:
    """The command a frame's payload carries; trailing bytes are ignored, as Java does."""
    plan = _PLANS.get(type_code)
    if plan is None:
        raise MalformedCommand(f"unknown command type {type_code}")
    if len(payload) > MAX_WIRECOMMAND_SIZE:
        raise MalformedCommand(f"payload of {len(payload)} bytes is too large")
    try:
        command, _ = plan.decode_at(payload, 0)
    except MalformedCommand:
        raise
    except _DECODE_ERRORS as exc:
        raise MalformedCommand(f"malformed {plan.cls.__name__}: {exc}") from exc
    result: Command = command
    return result


def check_header(type_code: int, length: int) -> None:
    """Refuses a frame header before its payload is read."""
    if type_code not in _PLANS:
        raise MalformedCommand(f"unknown command type {type_code}")
    if length < 0 or length > MAX_WIRECOMMAND_SIZE:
        raise MalformedCommand(f"frame length {length}")


async def read_command(reader: asyncio.StreamReader) -> Command:
    """The next frame off the stream (asyncio.IncompleteReadError at end of stream)."""
    type_code, length = _HEADER.unpack(await reader.readexactly(HEADER_SIZE))
    check_header(type_code, length)
    return decode(type_code, await reader.readexactly(length))


def frame_header(header: bytes) -> tuple[int, int]:
    """The type and payload length of a frame's 8-byte header, refused as check_header does."""
    type_code, length = _HEADER.unpack(header)
    check_header(type_code, length)
    return type_code, length


def _token_prefix(cls: type) -> tuple[Wire, ...] | None:
    # The fields up to and including the delegation token, when each is a fixed-size field or a
    # string (so they can be read before the rest) and one of them names the segment.
    kinds: list[Wire] = []
    for field, kind in _wire_fields(cls):
        if field.default is not dataclasses.MISSING or not (kind in _FIXED_FORMAT or kind is Wire.STR):
            return None
        if field.name == "delegation_token":
            return (*kinds, kind) if Wire.STR in kinds and kind is Wire.STR else None
        kinds.append(kind)
    return None


_TOKEN_PREFIXES: Final[dict[int, tuple[Wire, ...]]] = {
    code: prefix for code, cls in COMMANDS.items() if (prefix := _token_prefix(cls)) is not None
}


async def read_token_prefix(
    reader: asyncio.StreamReader, type_code: int, length: int
) -> tuple[bytes, str, str] | None:
    """For a frame whose payload begins with fixed-size fields and strings up to its delegation
    token, reads those (at most two 64 KiB strings, never the rest of a large frame): the bytes
    read, its first string (the segment it names) and the token. None for other frame types."""
    kinds = _TOKEN_PREFIXES.get(type_code)
    if kinds is None:
        return None
    parts: list[bytes] = []
    strings: list[str] = []
    left = length

    async def take(n: int) -> bytes:
        nonlocal left
        if n > left:
            raise MalformedCommand(f"field of {n} bytes with {left} left in the frame")
        left -= n
        data = await reader.readexactly(n)
        parts.append(data)
        return data

    for kind in kinds:
        if kind is not Wire.STR:
            await take(_FIXED_SIZE[kind])
            continue
        (n,) = _U16.unpack(await take(2))
        try:
            strings.append((await take(n)).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise MalformedCommand(f"string field: {exc}") from exc
    return b"".join(parts), strings[0], strings[-1]


def append_data(block: AppendBlock | None, end: AppendBlockEnd) -> bytes:
    """The bytes one append stores: a Java AppendBlock's whole events, the event its nested
    PartialEvent began and `end.data` finishes; or just `end.data` with no block (Rust)."""
    if end.num_event <= 0:
        raise MalformedCommand(f"append of {end.num_event} events")
    if block is None:
        return end.data
    if block.writer_id != end.writer_id:
        raise MalformedCommand("AppendBlockEnd writer differs from its AppendBlock's")
    whole = end.size_of_whole_events
    if whole < 0 or whole > len(block.data):
        raise MalformedCommand(f"{whole} bytes of whole events in a block of {len(block.data)}")
    if whole == len(block.data):
        # Java ignores end.data here; no Java writer sends it, so data there means corruption.
        if end.data:
            raise MalformedCommand("AppendBlockEnd data after a block with no partial event")
        return block.data
    tail = block.data[whole:]
    if len(tail) < HEADER_SIZE:
        raise MalformedCommand("truncated frame at the end of an AppendBlock")
    type_code, length = _HEADER.unpack_from(tail)
    if length != len(tail) - HEADER_SIZE:
        raise MalformedCommand("the frame closing an AppendBlock does not fill it")
    if type_code == PartialEvent.TYPE:
        return block.data[:whole] + tail[HEADER_SIZE:] + end.data
    if type_code == Padding.TYPE:
        if end.data:
            raise MalformedCommand("AppendBlockEnd data after a padded block")
        return block.data[:whole]
    raise MalformedCommand(f"type {type_code} closes an AppendBlock; expected PartialEvent or Padding")
