"""Queries over a stream's epoch history: successors, stream-cut validity, segments between
two cuts, and scaling events. Each reads its epochs in one round trip (or from the cache),
so the cost does not grow with the length of the history."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.domain.errors import InvalidInput
from app.domain.names import require_scope_name, require_stream_name
from app.domain.records import EpochRecord, SegmentRecord
from app.domain.streamcuts import (
    EpochWindow,
    between_epoch_range,
    cut_epoch_range,
    is_stream_cut_valid,
    segments_between_cuts,
    successors_with_predecessors,
)
from app.ports import StreamStore

SCALING_EVENTS_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class ScalingEvent:
    """One epoch as Pravega's REST scaling-events lists it."""

    timestamp: int
    segments: tuple[SegmentRecord, ...]
    splits: int
    merges: int


class HistoryQueries:
    def __init__(self, streams: StreamStore) -> None:
        self._streams = streams

    async def successors(self, scope: str, name: str, segment: int) -> list[tuple[SegmentRecord, list[int]]]:
        """Empty while the segment is unsealed or unknown. NotFound for a missing stream."""
        _require_stream(scope, name)
        found = await self._streams.get_successor_epochs(scope, name, segment)
        if found is None:
            return []
        sealed_in, previous = found
        return successors_with_predecessors(segment, sealed_in, previous)

    async def is_stream_cut_valid(self, scope: str, name: str, cut: Mapping[int, int]) -> bool:
        _require_stream(scope, name)
        if not cut:
            raise InvalidInput("the stream cut must not be empty")
        low, high = cut_epoch_range(cut)
        records = await self._streams.get_epochs(scope, name, low, high)
        if not records or records[0].epoch != low or records[-1].epoch != high:
            return False  # some id names an epoch the stream never had
        return is_stream_cut_valid(cut, EpochWindow.of(records))

    async def segments_between(
        self, scope: str, name: str, from_cut: Mapping[int, int], to_cut: Mapping[int, int]
    ) -> list[int]:
        _require_stream(scope, name)
        if not from_cut and not to_cut:
            raise InvalidInput("at least one of the stream cuts must be given")
        _state, active = await self._streams.get_active_epoch(scope, name)
        low, high = between_epoch_range(from_cut, to_cut, active.epoch)
        records = await self._streams.get_epochs(scope, name, low, high)
        if not records or records[0].epoch != low or records[-1].epoch != high:
            raise InvalidInput("a stream cut names an epoch the stream does not have")
        return sorted(s.id for s in segments_between_cuts(from_cut, to_cut, EpochWindow.of(records)))

    async def scaling_events(self, scope: str, name: str, from_ms: int, to_ms: int) -> list[ScalingEvent]:
        """The epoch in force at `from_ms`, then every epoch created up to `to_ms`."""
        _require_stream(scope, name)
        if from_ms > to_ms:
            raise InvalidInput(f"'from' ({from_ms}) must not be after 'to' ({to_ms})")
        records = await self._streams.get_epochs_by_time(scope, name, from_ms, to_ms, SCALING_EVENTS_LIMIT)
        return [_event(record) for record in records]


def _event(record: EpochRecord) -> ScalingEvent:
    return ScalingEvent(record.creation_time, record.sorted_segments(), record.splits, record.merges)


def _require_stream(scope: str, name: str) -> None:
    # A name outside Pravega's rule names no stream: refused before any query.
    require_scope_name(scope)
    require_stream_name(name)
