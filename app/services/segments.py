"""Segment queries: current and epoch segments, the stream head, validity and getURI.

These are the hot read paths; each is one store read (getURI none at all).
"""

from __future__ import annotations

from app.domain.errors import IllegalState, InvalidInput
from app.domain.hosts import HostAddress
from app.domain.ids import qualified_segment_name
from app.domain.names import require_present, require_scope_name, require_stream_name
from app.domain.records import SegmentRecord, StreamState
from app.ports import SegmentStoreLocator, StreamStore

_NOT_YET_READABLE = (StreamState.UNKNOWN, StreamState.CREATING)


def _require_stream(scope: str, stream: str) -> None:
    # A name outside Pravega's rule names no stream: refused before any query.
    require_scope_name(scope)
    require_stream_name(stream)


class SegmentQueries:
    def __init__(self, streams: StreamStore, locator: SegmentStoreLocator) -> None:
        self._streams = streams
        self._locator = locator

    async def current_segments(self, scope: str, stream: str) -> tuple[SegmentRecord, ...]:
        """Sorted by key; empty for a sealed stream. IllegalState while still being created."""
        _require_stream(scope, stream)
        state, epoch = await self._streams.get_active_epoch(scope, stream)
        if state in _NOT_YET_READABLE:
            raise IllegalState(f"stream {scope}/{stream} is still being created")
        if state == StreamState.SEALED:
            return ()
        return epoch.sorted_segments()

    async def epoch_segments(self, scope: str, stream: str, epoch: int) -> tuple[SegmentRecord, ...]:
        _require_stream(scope, stream)
        if epoch < 0:
            raise InvalidInput(f"epoch must not be negative, got {epoch}")
        record = await self._streams.get_epoch(scope, stream, epoch)
        return record.sorted_segments()

    async def head(self, scope: str, stream: str) -> dict[int, int]:
        """The stream's head as segment id -> offset (the request timestamp is ignored, as in Java)."""
        _require_stream(scope, stream)
        return await self._streams.get_head(scope, stream)

    async def is_segment_valid(self, scope: str, stream: str, segment: int) -> bool:
        _require_stream(scope, stream)
        state, epoch = await self._streams.get_active_epoch(scope, stream)
        if state in _NOT_YET_READABLE:
            raise IllegalState(f"stream {scope}/{stream} is still being created")
        if state == StreamState.SEALED:
            return False
        return epoch.contains(segment)

    def uri(self, scope: str, stream: str, segment: int) -> HostAddress:
        """Where the segment's container lives. No existence check: clients ask for reader-group
        table segments the controller never created (their names, e.g. `<kvt>_kvtable`, are
        outside the stream-name rule), and nothing is queried: only presence is checked."""
        require_present("scope", scope)
        require_present("stream", stream)
        return self._locator.endpoint_for_segment(qualified_segment_name(scope, stream, segment))
