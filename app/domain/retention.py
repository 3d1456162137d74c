"""Retention rules (Pravega's retention cycle): when a tail cut is recorded, which recorded cut a
stream is truncated at for TIME and SIZE policies with and without subscribers, what is purged
afterwards, and the subscribers' lower bound.

Pure: the caller fetches the epochs (an EpochWindow) and sizes; nothing here does I/O. Every
choice returns a cut that is one of the inputs (a recorded cut or the lower bound), never a
cut assembled here, so a truncation can only land where a record or a subscriber has been.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from app.domain.errors import InvalidInput
from app.domain.ids import epoch_of
from app.domain.records import RetentionPolicy, RetentionType, SegmentRecord
from app.domain.streamcuts import (
    Cut,
    CutOrder,
    EpochWindow,
    compare_stream_cuts,
    cut_equal_or_after,
    segments_between,
    size_between,
    stream_cut_span,
)

# How often a stream with a retention policy records a stream cut and is considered for
# truncation: Pravega's retention.frequency.minutes (30). serve's setting and the seeder default to it.
DEFAULT_RETENTION_FREQUENCY_MS: Final = 30 * 60_000


@dataclass(frozen=True, slots=True)
class StreamCutRecord:
    """One entry of a stream's retention set: a tail cut, when it was taken, and the bytes
    written from the stream's epoch-0 head up to it (truncated bytes included)."""

    recording_time: int
    recording_size: int
    stream_cut: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SubscriberRecord:
    """A reader group subscribed to a stream: named "<rgScope>/<rgName>", with the
    reader group's id and generation it was registered with and the cut it last published
    (empty until it publishes one)."""

    subscriber: str
    reader_group_id: uuid.UUID
    generation: int
    truncation_stream_cut: Mapping[int, int] = field(default_factory=dict)
    update_time: int = 0


def reader_group_uuid(text: str) -> uuid.UUID | None:
    """A reader group id as sent on the wire, or None when it is not a UUID."""
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


# --- recording the tail cut --------------------------------------------------------------------


def should_record(latest: StreamCutRecord | None, now_ms: int, frequency_ms: int) -> bool:
    """A new tail cut is taken only for an empty set or once the latest is strictly older
    than the frequency."""
    return latest is None or now_ms - latest.recording_time > frequency_ms


def is_newer(record: StreamCutRecord, latest: StreamCutRecord | None) -> bool:
    """Records are appended only if newer than the latest (RetentionSet#addReferenceToStreamCutIfLatest)."""
    return latest is None or record.recording_time > latest.recording_time


# --- cut ordering over a window ---------------------------------------------------------------------


class CutOrdering:
    """Spans, comparisons and sizes of cuts of one stream, over one fetched EpochWindow that
    covers every epoch the cuts name (and epoch 0 when a size is measured from the head)."""

    def __init__(self, window: EpochWindow) -> None:
        self.window = window
        self._spans: dict[tuple[int, ...], dict[SegmentRecord, int]] = {}

    def span(self, cut: Cut) -> dict[SegmentRecord, int]:
        # A span depends only on the cut's ids, so cuts differing in offsets share one.
        key = tuple(sorted(cut))
        found = self._spans.get(key)
        if found is None:
            found = stream_cut_span(cut, self.window)
            self._spans[key] = found
        return found

    def compare(self, cut_a: Cut, cut_b: Cut) -> CutOrder:
        return compare_stream_cuts(cut_a, self.span(cut_a), cut_b, self.span(cut_b))

    def equal_or_after(self, cut_a: Cut, cut_b: Cut) -> bool:
        return cut_equal_or_after(cut_a, self.span(cut_a), cut_b, self.span(cut_b))

    def size_till(
        self, cut: Cut, sealed_sizes: Mapping[int, int], reference: StreamCutRecord | None = None
    ) -> int:
        """Bytes from the epoch-0 head to `cut` (truncated bytes too), counted on from `reference` when given:
        its size plus the bytes between it and `cut`. The reference must be at or before `cut`."""
        between = segments_between(
            None if reference is None else self.span(reference.stream_cut), self.span(cut), self.window
        )
        base_cut: Cut = {} if reference is None else reference.stream_cut
        base = 0 if reference is None else reference.recording_size
        return base + size_between(base_cut, cut, between, sealed_sizes)


# --- choosing the truncation cut --------------------------------------------------------------------


def retained_function(
    policy: RetentionPolicy, records: Sequence[StreamCutRecord], now_ms: int
) -> Callable[[StreamCutRecord], int]:
    """What truncating at a record would keep: bytes written since it (SIZE, measured against
    the latest record) or its age (TIME)."""
    if policy.retention_type is RetentionType.SIZE:
        current = records[-1].recording_size if records else 0
        return lambda record: current - record.recording_size
    return lambda record: now_ms - record.recording_time


@dataclass(frozen=True, slots=True)
class BoundCuts:
    """min_cut: the record with the smallest retained value >= min (the newest cut that still
    keeps at least min). max_cut: the record with the largest retained value within [min, max],
    falling back to min_cut."""

    min_cut: StreamCutRecord | None
    max_cut: StreamCutRecord | None


def bound_cuts(
    policy: RetentionPolicy, records: Sequence[StreamCutRecord], retained: Callable[[StreamCutRecord], int]
) -> BoundCuts:
    """StreamMetadataTasks#getBoundStreamCuts: strict comparisons, so among equal values the
    oldest record wins, as in Java's scan of the ordered set."""
    low, high = policy.retention_param, policy.retention_max
    min_cut: StreamCutRecord | None = None
    max_cut: StreamCutRecord | None = None
    min_value = max_value = 0
    for record in records:
        value = retained(record)
        if value < low:
            continue
        if value <= high and (max_cut is None or value > max_value):
            max_cut, max_value = record, value
        if min_cut is None or value < min_value:
            min_cut, min_value = record, value
    return BoundCuts(min_cut, max_cut if max_cut is not None else min_cut)


def newest_at_or_before(
    cut: Cut, records: Sequence[StreamCutRecord], ordering: CutOrdering
) -> StreamCutRecord | None:
    """The newest record that `cut` is equal-or-after (findStreamCutReferenceRecordBefore).
    Java binary-searches the set assuming it is ordered; scanning from the newest gives the
    same record for an ordered set and a defined one otherwise."""
    for record in reversed(records):
        if ordering.equal_or_after(cut, record.stream_cut):
            return record
    return None


def choose_truncation_cut(
    policy: RetentionPolicy,
    records: Sequence[StreamCutRecord],
    now_ms: int,
    ordering: CutOrdering,
    lower_bound: Mapping[int, int] | None = None,
    lower_bound_size_till: int | None = None,
) -> dict[int, int] | None:
    """Where retention truncates now, or None. `records` is the retention set in recording
    order, the newly recorded tail included. `lower_bound` is the subscribers' lower bound
    (empty or None: no subscriber has published a cut); for SIZE policies with a lower bound,
    `lower_bound_size_till` is its size from the epoch-0 head."""
    if not records:
        return None
    retained = retained_function(policy, records, now_ms)
    bounds = bound_cuts(policy, records, retained)
    if not lower_bound:
        # Without subscribers max has no effect: the stream is trimmed to just over min.
        return _cut_of(bounds.min_cut)
    if policy.retention_type is RetentionType.SIZE:
        if lower_bound_size_till is None:
            raise InvalidInput("a SIZE policy with subscribers needs the lower bound's size")
        return _by_size_with_lower_bound(
            policy, records, retained, bounds, lower_bound, lower_bound_size_till, ordering
        )
    return _by_time_with_lower_bound(policy, records, retained, bounds, lower_bound, ordering)


def _by_size_with_lower_bound(
    policy: RetentionPolicy,
    records: Sequence[StreamCutRecord],
    retained: Callable[[StreamCutRecord], int],
    bounds: BoundCuts,
    lower_bound: Mapping[int, int],
    lower_bound_size_till: int,
    ordering: CutOrdering,
) -> dict[int, int] | None:
    kept_by_lower_bound = records[-1].recording_size - lower_bound_size_till
    if kept_by_lower_bound < policy.retention_param:
        # Truncating at the lower bound would keep less than min: use min if it is wholly
        # behind the readers, else the newest recorded cut the readers have all passed.
        if bounds.min_cut is None:
            return None
        if ordering.compare(bounds.min_cut.stream_cut, lower_bound) is CutOrder.BEFORE:
            return dict(bounds.min_cut.stream_cut)
        return _cut_of(newest_at_or_before(lower_bound, records, ordering))
    if kept_by_lower_bound < policy.retention_max:
        return dict(lower_bound)
    # A lagging reader holds more than max: truncate at max if that drops more than the lower
    # bound would, accepting that the reader loses data.
    if bounds.max_cut is not None and retained(bounds.max_cut) < kept_by_lower_bound:
        return dict(bounds.max_cut.stream_cut)
    return dict(lower_bound)


def _by_time_with_lower_bound(
    policy: RetentionPolicy,
    records: Sequence[StreamCutRecord],
    retained: Callable[[StreamCutRecord], int],
    bounds: BoundCuts,
    lower_bound: Mapping[int, int],
    ordering: CutOrdering,
) -> dict[int, int] | None:
    if bounds.min_cut is None:
        return None
    against_min = ordering.compare(bounds.min_cut.stream_cut, lower_bound)
    if against_min is CutOrder.BEFORE:
        return dict(bounds.min_cut.stream_cut)
    if against_min is CutOrder.OVERLAPS:
        return _cut_of(newest_at_or_before(lower_bound, records, ordering))
    # min is at or after the readers: truncate at the lower bound unless it still holds data
    # older than max, the newest record at least max old.
    max_bound = max(
        (r for r in records if retained(r) >= policy.retention_max),
        key=lambda r: r.recording_time,
        default=None,
    )
    if max_bound is None:
        return dict(lower_bound)
    against_max = ordering.compare(lower_bound, max_bound.stream_cut)
    if against_max is CutOrder.EQUAL_OR_AFTER:
        return dict(lower_bound)
    if against_max is CutOrder.BEFORE:
        # max_cut falls back to min_cut, which exists here.
        return _cut_of(bounds.max_cut)
    return dict(max_bound.stream_cut)


def _cut_of(record: StreamCutRecord | None) -> dict[int, int] | None:
    return None if record is None else dict(record.stream_cut)


# --- purge: the records at or before the truncation cut ------------------------------------------


def purge_up_to(
    truncated_at: Cut, records: Sequence[StreamCutRecord], ordering: CutOrdering
) -> StreamCutRecord | None:
    """The record at or before the truncation cut: it and everything older are purged once the
    truncation started. None: nothing to purge."""
    return newest_at_or_before(truncated_at, records, ordering)


def purged(records: Sequence[StreamCutRecord], up_to: StreamCutRecord) -> list[StreamCutRecord]:
    """The records a purge up to `up_to` removes (recording times are the set's keys)."""
    return [r for r in records if r.recording_time <= up_to.recording_time]


# --- subscribers' lower bound (computeSubscribersLowerBound) -------------------------------------


def subscribers_lower_bound(cuts: Iterable[Mapping[int, int]], window: EpochWindow) -> dict[int, int]:
    """StreamMetadataTasks#computeSubscribersLowerBound over the subscribers' published cuts, in
    the order given: shared segments take the minimum offset; an older (lower id) segment
    replaces newer overlapping ones already included; a newer segment is dropped when an older
    overlapping one is in; a future entry (< 0) stays only where included predecessors leave
    part of its range uncovered. Empty cuts contribute nothing. The window must hold the
    creation epoch of every id."""
    bound: dict[SegmentRecord, int] = {}
    for cut in cuts:
        for segment_id, offset in sorted(cut.items()):
            segment = window.find(segment_id)
            if segment is None:
                raise InvalidInput(f"segment {segment_id} of a subscriber's cut is not part of the stream")
            if segment in bound:
                bound[segment] = min(bound[segment], offset)
                continue
            predecessors = _predecessors_in(bound, segment)
            successors = [s for s in bound if s.overlaps(segment) and s.id > segment.id]
            if not predecessors and not successors:
                bound[segment] = offset
            elif offset < 0:
                if not _covered(segment, predecessors):
                    bound[segment] = offset
            elif not predecessors:
                bound[segment] = offset
                for successor in successors:
                    # A read successor is replaced; a future one only once its range is covered.
                    if bound[successor] >= 0 or _covered(successor, _predecessors_in(bound, successor)):
                        del bound[successor]
            # else: a read position newer than an included predecessor adds nothing lower.
    return {s.id: offset for s, offset in sorted(bound.items(), key=lambda item: item[0].id)}


def _predecessors_in(bound: Iterable[SegmentRecord], segment: SegmentRecord) -> list[SegmentRecord]:
    return [s for s in bound if s.overlaps(segment) and s.id < segment.id]


def _covered(segment: SegmentRecord, by: Iterable[SegmentRecord]) -> bool:
    """Whether the union of `by`'s key ranges covers the segment's range (Java's checkCoverage
    intends this; it forgets to advance past the second range, we do not copy that)."""
    point = segment.key_start
    for other in sorted(by, key=lambda s: s.key_start):
        if other.key_start > point:
            return False
        point = max(point, other.key_end)
        if point >= segment.key_end:
            return True
    return point >= segment.key_end


def epochs_named(cuts: Iterable[Mapping[int, int]]) -> tuple[int, int] | None:
    """Creation epochs of the oldest and the newest id over all the cuts (None: no ids)."""
    ids = [segment for cut in cuts for segment in cut]
    if not ids:
        return None
    return epoch_of(min(ids)), epoch_of(max(ids))
