"""Where the embedded segment stores keep each segment's bytes (app/store/storage_report.py)."""

from __future__ import annotations

from typing import Protocol

from app.domain.segment_storage import SegmentBytes


class SegmentStorageReport(Protocol):
    async def stream_segments(self, scope: str, stream: str) -> list[SegmentBytes]:
        """Every stream, transaction and transient segment of the stream the stores hold, in name
        order; none for a stream they hold nothing of."""
        ...
