"""Revisioned `_MARK<stream>` segments over the wire: the controller appends watermarks to them (the
MarkStream port) and anyone reads them back (`MarkReader`), in Pravega's own format, so a Java
reader and this project's reader see the same watermarks.

Invariant: an append lands only at the offset the writer names (ConditionalAppend), so a watermark
can follow only the one it was computed after, and a retried append never lands twice; a read
goes no further than the length the segment had when it started, so it never waits at the tail.
"""

from __future__ import annotations

from app.domain.errors import FinalFailure, InvalidInput
from app.domain.watermarks import MarkEntry, Watermark
from app.ports import MarkTail
from app.segmentstore.client.store import WireSegmentStore
from app.segmentstore.watermark_codec import MalformedWatermark, decode_entries, serialize_watermark


class WireMarkStream:
    """The MarkStream port over `WireSegmentStore`."""

    def __init__(self, store: WireSegmentStore) -> None:
        self._store = store

    async def append(self, segment: str, watermark: Watermark, expected_offset: int) -> int | None:
        try:
            payload = serialize_watermark(watermark)
        except MalformedWatermark as exc:
            # A domain error, so the round skips this stream instead of failing the page.
            raise InvalidInput(f"a watermark for {segment} cannot be written: {exc}") from exc
        # A missing segment is NotFound, not created here: stream creation creates it (as
        # Pravega's does), and one missing now belongs to a stream being deleted.
        return await self._store.conditional_append(segment, payload, expected_offset)

    async def read_from(self, segment: str, offset: int) -> MarkTail:
        info = await self._store.get_segment_info(segment)
        if offset > info.length:
            offset = info.start_offset  # it lost what the caller knew of it: all it holds now
        entries = await _entries(self._store, segment, offset, info.start_offset, info.length)
        return MarkTail(tuple(entries), info.length)


class MarkReader:
    """Reads one `_MARK` segment's watermarks in order, as Pravega's WatermarkReaderImpl fetches
    them: from the segment's oldest entry, then each call continues where the last one ended."""

    def __init__(self, store: WireSegmentStore, segment: str) -> None:
        self._store = store
        self.segment = segment
        self.position: int | None = None  # the next entry's start; None: the segment's start

    async def read_new(self) -> list[MarkEntry]:
        """The watermarks appended since the last call (all of them on the first)."""
        info = await self._store.get_segment_info(self.segment)
        if self.position is None:
            self.position = info.start_offset
        entries = await _entries(self._store, self.segment, self.position, info.start_offset, info.length)
        if entries:
            self.position = entries[-1].end
        return entries


async def _entries(
    store: WireSegmentStore, segment: str, offset: int, start: int, end: int
) -> list[MarkEntry]:
    """The watermarks of [offset, end) of a segment starting at `start` and `end` long."""
    if offset < start:
        raise InvalidInput(f"segment {segment} is truncated at {start}, past {offset}")
    if offset > end:
        raise InvalidInput(f"segment {segment} has length {end}, short of {offset}")
    data = await store.read_range(segment, offset, end)
    try:
        return decode_entries(data, offset)
    except MalformedWatermark as exc:
        # Nothing a retry could fix: something other than a watermark writer wrote there.
        raise FinalFailure(f"segment {segment} does not hold watermarks from {offset}: {exc}") from exc
