"""Revisioned `_MARK<stream>` segments over the wire: the controller appends watermarks to them (the
MarkStream port) and anyone reads them back (`MarkReader`), in Pravega's own format, so a Java
reader and this project's reader see the same watermarks.

Invariant: an append lands only at the offset the writer names (ConditionalAppend), so a watermark
can follow only the one it was computed after, and a retried append never lands twice; a read
goes no further than the length the segment had when it started, so it never waits at the tail.
"""

from __future__ import annotations

from app.domain.errors import FinalFailure, InvalidInput, NotFound
from app.domain.records import ScaleType
from app.domain.watermarks import MarkEntry, Watermark
from app.segmentstore.client.store import WireSegmentStore
from app.segmentstore.watermark_codec import MalformedWatermark, decode_entries, serialize_watermark


class WireMarkStream:
    """The MarkStream port over `WireSegmentStore`."""

    def __init__(self, store: WireSegmentStore) -> None:
        self._store = store

    async def append(self, segment: str, watermark: Watermark, expected_offset: int) -> int | None:
        payload = serialize_watermark(watermark)
        try:
            return await self._store.conditional_append(segment, payload, expected_offset)
        except NotFound:
            # The mark stream's metadata exists but its segment does not (a history seeded without
            # the data plane, a store that lost it): created as stream creation creates it, once.
            await self._store.create_segment(segment, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
            return await self._store.conditional_append(segment, payload, expected_offset)

    async def read_from(self, segment: str, offset: int) -> list[MarkEntry]:
        info = await self._store.get_segment_info(segment)
        if offset < info.start_offset:
            raise InvalidInput(f"segment {segment} is truncated at {info.start_offset}, past {offset}")
        if offset > info.length:
            raise InvalidInput(f"segment {segment} has length {info.length}, short of {offset}")
        data = await self._store.read_range(segment, offset, info.length)
        try:
            return decode_entries(data, offset)
        except MalformedWatermark as exc:
            # Nothing a retry could fix: something other than a watermark writer wrote there.
            raise FinalFailure(f"segment {segment} does not hold watermarks from {offset}: {exc}") from exc


class MarkReader:
    """Reads one `_MARK` segment's watermarks in order, as Pravega's WatermarkReaderImpl fetches
    them: from the segment's oldest entry, then each call continues where the last one ended."""

    def __init__(self, store: WireSegmentStore, segment: str) -> None:
        self._marks = WireMarkStream(store)
        self._store = store
        self.segment = segment
        self.position: int | None = None  # the next entry's start; None: the segment's start

    async def read_new(self) -> list[MarkEntry]:
        """The watermarks appended since the last call (all of them on the first)."""
        if self.position is None:
            self.position = (await self._store.get_segment_info(self.segment)).start_offset
        entries = await self._marks.read_from(self.segment, self.position)
        if entries:
            self.position = entries[-1].end
        return entries
