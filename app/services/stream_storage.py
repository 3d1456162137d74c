"""Where a stream's bytes are, segment by segment (our REST extension: PostgreSQL keeps the open
tails, the long-term tier the rest)."""

from __future__ import annotations

from app.domain.errors import NotFound
from app.domain.segment_storage import SegmentBytes
from app.ports import SegmentStorageReport, StreamStore


class StreamStorageQuery:
    def __init__(self, streams: StreamStore, report: SegmentStorageReport) -> None:
        self._streams = streams
        self._report = report

    async def segments(self, scope: str, name: str) -> list[SegmentBytes]:
        """NotFound for a stream that does not exist (a stream being created may have none yet)."""
        if not await self._streams.stream_exists(scope, name):
            raise NotFound(f"stream {scope}/{name} not found")
        return await self._report.stream_segments(scope, name)
