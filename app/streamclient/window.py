"""The events of a part of a segment, including parts that start at a byte offset that is not
known to begin an event, so a large range can be read by several tasks at once.

Pravega's event framing (an 8-byte header: type 0, then the payload's length) has no sync mark,
so where an event begins is only certain from an offset known to begin one: a cut's offset, a
segment's start or end. A part [lo, hi) of a range [start, end) holds the events that *begin*
in it; its first event is found by `find_boundary(lo)`: the first offset at or after `lo` from
which a chain of well-formed headers runs on for CHAIN_BYTES bytes, or lands exactly on `end`.
A payload could mimic such a chain, so the part's reader checks its successor: after reading up
to `hi` along the true chain, it requires `find_boundary(hi)` to be exactly where that chain
crossed `hi`. The first part starts at `start`, a true boundary, so by induction every part of
a range whose parts all succeed starts on a true boundary: each event is read exactly once, or
the read fails (never a wrong event).
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from typing import Final

from app.segmentstore.wire import commands as wc
from app.streamclient.errors import StreamError
from app.streamclient.segments import StreamSegments

_HEADER: Final = struct.Struct(">ii")
_TYPE: Final = wc.Event.TYPE
_ZERO_TYPE: Final = b"\x00\x00\x00\x00"
# Serialization.MAX_EVENT_SIZE: no header of a Pravega event says more.
MAX_EVENT_SIZE: Final = 8 * 1024 * 1024
CHAIN_BYTES: Final = 256 * 1024
# A batch of events is handed out once it holds this many bytes (or the part ends).
BATCH_BYTES: Final = 1024 * 1024


class SegmentWindow:
    """The bytes of [start, end) of one segment, fetched forward on demand, dropped once used."""

    def __init__(self, segments: StreamSegments, segment_id: int, start: int, end: int) -> None:
        self.segments = segments
        self.segment_id = segment_id
        self.name = segments.name(segment_id)
        self.end = end
        self.base = start  # the offset of buffer[0]
        self.buffer = bytearray()
        self._fetched = start

    @property
    def filled(self) -> int:
        return self.base + len(self.buffer)

    async def fill(self, upto: int) -> bool:
        """Fetches until [base, upto) is held; False if `upto` lies past `end`."""
        while self._fetched < min(upto, self.end):
            for reply in await self.segments.read_ahead(self.segment_id, self._fetched, self.end):
                if reply.offset != self._fetched:
                    break
                if not reply.data:
                    raise StreamError(
                        f"segment {self.name} ends at {self._fetched}, before offset {self.end} to be read"
                    )
                self.buffer += reply.data
                self._fetched += len(reply.data)
        return upto <= self.end

    def header(self, offset: int) -> tuple[int, int]:
        kind, length = _HEADER.unpack_from(self.buffer, offset - self.base)
        return int(kind), int(length)

    def drop_before(self, offset: int) -> None:
        if offset > self.base:
            del self.buffer[: offset - self.base]
            self.base = offset


async def find_boundary(window: SegmentWindow, at: int) -> int:
    """The first offset at or after `at` that begins a plausible chain of events (`end` if none)."""
    position = at
    while position + 8 <= window.end:
        await window.fill(min(position + CHAIN_BYTES, window.end))
        found = window.buffer.find(_ZERO_TYPE, position - window.base)
        if found < 0:
            if window.filled >= window.end:
                return window.end
            position = max(position, window.filled - 3)
            continue
        candidate = window.base + found
        if await _chain_holds(window, candidate):
            return candidate
        position = candidate + 1
    return window.end


async def _chain_holds(window: SegmentWindow, start: int) -> bool:
    at = start
    while at < window.end and at - start < CHAIN_BYTES:
        if not await window.fill(at + 8):
            return False
        kind, length = window.header(at)
        if kind != _TYPE or not 0 <= length <= MAX_EVENT_SIZE:
            return False
        at += 8 + length
    return at <= window.end


async def read_part(
    segments: StreamSegments,
    segment_id: int,
    start: int,
    end: int,
    lo: int,
    hi: int,
    *,
    check_successor: bool = True,
) -> AsyncIterator[list[tuple[int, bytes]]]:
    """The events of segment range [start, end) that begin in [lo, hi), with their offsets, in
    batches of about BATCH_BYTES. `check_successor`: another part begins at `hi` (see above);
    without it, `hi` is only a bound (and `lo` must be `start`)."""
    if not check_successor and lo != start:
        raise ValueError("a part that starts inside a range is checked by the part before it")
    window = SegmentWindow(segments, segment_id, start if lo == start else lo, end)
    position = lo if lo == start else await find_boundary(window, lo)
    while position < hi:
        # The events already fetched are cut out in one synchronous pass; only a header or a
        # payload that runs past what is held waits for the next replies.
        batch, position = _whole_events(window, position, hi)
        if batch:
            yield batch
            window.drop_before(position)
            continue
        if not await window.fill(position + 8):
            raise _torn(window, position)
        _, length = _checked_header(window, position)
        if not await window.fill(position + 8 + length):
            raise _torn(window, position)
    if check_successor and hi < end:
        window.drop_before(min(position, hi))
        successor = await find_boundary(_rewound(window, hi), hi)
        if successor != position:
            raise StreamError(
                f"segment {window.name}: events cannot be split at offset {hi} (the part after it would "
                f"start at {successor}, the events run to {position}); read with split_size_bytes=0"
            )


def _whole_events(window: SegmentWindow, position: int, hi: int) -> tuple[list[tuple[int, bytes]], int]:
    """The events from `position` that begin before `hi` and lie wholly in what `window` holds,
    up to about BATCH_BYTES of them, and where the next one begins."""
    batch: list[tuple[int, bytes]] = []
    size = 0
    held = window.filled
    base = window.base
    view = memoryview(window.buffer)
    try:
        while position < hi and position + 8 <= held and size < BATCH_BYTES:
            kind, length = _HEADER.unpack_from(view, position - base)
            if kind != _TYPE or length < 0:
                _checked_header(window, position)
            finish = position + 8 + length
            if finish > held:
                break
            at = position + 8 - base
            batch.append((position, view[at : at + length].tobytes()))
            size += length
            position = finish
    finally:
        view.release()
    return batch, position


def _checked_header(window: SegmentWindow, position: int) -> tuple[int, int]:
    kind, length = window.header(position)
    if kind != _TYPE or length < 0:
        raise StreamError(
            f"segment {window.name} holds no event at offset {position} (type {kind}, length {length}): "
            "was it written by a Pravega event writer?"
        )
    return kind, length


def _rewound(window: SegmentWindow, at: int) -> SegmentWindow:
    """`window` if it still holds `at`, else a new one from `at`."""
    if window.base <= at:
        return window
    return SegmentWindow(window.segments, window.segment_id, at, window.end)


def _torn(window: SegmentWindow, position: int) -> StreamError:
    return StreamError(
        f"segment {window.name}: the event at offset {position} runs past offset {window.end}, "
        "which is not the end of an event"
    )
