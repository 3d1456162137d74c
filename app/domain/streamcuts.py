"""Stream-cut rules over a fetched run of epochs: successors, validity, spans, ordering,
segments and bytes between cuts, and the next truncation record, as Pravega's controller computes them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.domain.errors import IllegalState, InvalidInput
from app.domain.ids import epoch_of
from app.domain.records import EpochRecord, SegmentRecord, TruncationRecord

Cut = Mapping[int, int]
"""segment id -> offset; an offset < 0 marks a future segment."""

Span = Mapping[SegmentRecord, int]
"""cut segment -> the highest epoch (within the cut's epoch range) that holds it."""

KeyRange = tuple[float, float]


class CutOrder(enum.Enum):
    BEFORE = "Before"
    EQUAL_OR_AFTER = "EqualOrAfter"
    OVERLAPS = "Overlaps"


@dataclass(frozen=True, slots=True)
class EpochWindow:
    """A contiguous, ascending run of epoch records, as one range query returns them."""

    epochs: tuple[EpochRecord, ...]
    _by_id: tuple[dict[int, SegmentRecord], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.epochs:
            raise InvalidInput("an epoch window needs at least one epoch")
        first = self.epochs[0].epoch
        if any(record.epoch != first + i for i, record in enumerate(self.epochs)):
            raise InvalidInput("epoch records must be contiguous and ascending")
        object.__setattr__(self, "_by_id", tuple({s.id: s for s in r.segments} for r in self.epochs))

    @classmethod
    def of(cls, records: Iterable[EpochRecord]) -> EpochWindow:
        return cls(tuple(records))

    @property
    def low(self) -> int:
        return self.epochs[0].epoch

    @property
    def high(self) -> int:
        return self.epochs[-1].epoch

    def covers(self, epoch: int) -> bool:
        return self.low <= epoch <= self.high

    def record(self, epoch: int) -> EpochRecord:
        if not self.covers(epoch):
            raise InvalidInput(f"epoch {epoch} is outside the fetched epochs {self.low}..{self.high}")
        return self.epochs[epoch - self.low]

    def holds(self, epoch: int, segment: int) -> bool:
        """Whether `segment` is one of the segments of `epoch` (carried-over segments included)."""
        return segment in self._by_id[epoch - self.low] if self.covers(epoch) else False

    def find(self, segment: int) -> SegmentRecord | None:
        """The segment's record, looked up in the epoch its id was created in."""
        epoch = epoch_of(segment)
        return self._by_id[epoch - self.low].get(segment) if self.covers(epoch) else None


# --- epoch ranges a caller must fetch ----------------------------------------------------------


def cut_epoch_range(cut: Cut) -> tuple[int, int]:
    """Epochs of the oldest and the newest id of the cut: what validity and span need."""
    if not cut:
        raise InvalidInput("stream cut must not be empty")
    return epoch_of(min(cut)), epoch_of(max(cut))


def between_epoch_range(from_cut: Cut, to_cut: Cut, active_epoch: int) -> tuple[int, int]:
    """Epochs needed to take both spans and the segments between them; an empty cut means
    epoch 0 (from) or the active epoch (to)."""
    ids = [*from_cut, *to_cut]
    low = epoch_of(min(ids)) if from_cut else 0
    high = epoch_of(max(ids)) if to_cut else active_epoch
    return low, high


def truncation_epoch_range(previous: TruncationRecord, new_cut: Cut) -> tuple[int, int]:
    """Epochs needed to validate `new_cut`, span it, resolve the previous span and find what lies between."""
    low, high = cut_epoch_range(new_cut)
    if not previous.span:
        return 0, high
    old_low, old_high = cut_epoch_range(previous.span)
    return min(low, old_low), max(high, old_high)


# --- successors (getSegmentsImmediatelyFollowing) ------------------------------------------------


def successors_with_predecessors(
    segment: int, sealed_in: EpochRecord, previous: EpochRecord
) -> list[tuple[SegmentRecord, list[int]]]:
    """Segments of the epoch that sealed `segment` overlapping it, each with the sorted ids of
    the segments of the epoch before that overlap it; successors sorted by key start."""
    if previous.epoch != sealed_in.epoch - 1:
        raise InvalidInput(f"epoch {previous.epoch} does not precede epoch {sealed_in.epoch}")
    sealed = next((s for s in previous.segments if s.id == segment), None)
    if sealed is None:
        raise InvalidInput(f"segment {segment} is not in epoch {previous.epoch}")
    successors = [s for s in sealed_in.sorted_segments() if s.overlaps(sealed)]
    return [(s, sorted(p.id for p in previous.segments if p.overlaps(s))) for s in successors]


# --- validity (isStreamCutValid) -----------------------------------------------------------------


def is_stream_cut_valid(cut: Cut, window: EpochWindow) -> bool:
    """Whether the cut is one consistent position across the key space (Pravega's isStreamCutValid)."""
    epochs = cut_epoch_range(cut)
    found = _find_all(cut, window)
    if found is None:
        return False
    read = [s for s in found if cut[s.id] >= 0]
    future = [s for s in found if cut[s.id] < 0]
    if not read or not _futures_follow_reads(read, future):
        return False
    gaps = _gaps(read, _key_space_end(window.record(epochs[0])))
    if gaps is None or not all(any(_overlaps_range(f, gap) for f in future) for gap in gaps):
        return False
    return _history_consistent(gaps, read, set(cut), window, epochs)


def _find_all(cut: Cut, window: EpochWindow) -> list[SegmentRecord] | None:
    found = [window.find(segment) for segment in cut]
    return [s for s in found if s is not None] if None not in found else None


def _futures_follow_reads(read: Sequence[SegmentRecord], future: Sequence[SegmentRecord]) -> bool:
    return all(r.id < f.id for f in future for r in read if r.overlaps(f))


def _key_space_end(record: EpochRecord) -> float:
    # Uniform creation can end the key space at 0.9999999999999999 (n = 49, 98, ...); measuring the last
    # gap against the stream's own end keeps such streams truncatable, unlike Java's fixed 1.0.
    return max(s.key_end for s in record.segments)


def _gaps(read: Sequence[SegmentRecord], end: float) -> list[KeyRange] | None:
    """Key ranges no read segment covers, or None when two read segments overlap."""
    gaps: list[KeyRange] = []
    edge = 0.0
    for segment in sorted(read, key=lambda s: s.key_start):
        if segment.key_start < edge:
            return None
        if segment.key_start > edge:
            gaps.append((edge, segment.key_start))
        edge = segment.key_end
    if edge < end:
        gaps.append((edge, end))
    return gaps


def _overlaps_range(segment: SegmentRecord, key_range: KeyRange) -> bool:
    return segment.key_start < key_range[1] and segment.key_end > key_range[0]


def _history_consistent(
    gaps: Sequence[KeyRange],
    read: Sequence[SegmentRecord],
    in_cut: set[int],
    window: EpochWindow,
    epochs: tuple[int, int],
) -> bool:
    # Walking forward from what covered each gap in the cut's oldest epoch, every segment passed
    # without meeting the cut must already be behind the reader; an older read segment overlapping
    # it is one of its predecessors, so the cut would be both before and after that segment.
    pending = [s for s in window.record(epochs[0]).segments if any(_overlaps_range(s, g) for g in gaps)]
    walked: set[int] = set()
    while pending:
        segment = pending.pop()
        if segment.id in walked or segment.id in in_cut:
            continue
        walked.add(segment.id)
        if any(r.id < segment.id and r.overlaps(segment) for r in read):
            return False
        pending.extend(_successors_within(segment, window, epochs))
    return True


def _successors_within(
    segment: SegmentRecord, window: EpochWindow, epochs: tuple[int, int]
) -> list[SegmentRecord]:
    # Bounded by the cut's own epochs so the answer does not depend on how much history was fetched.
    for epoch in range(max(epoch_of(segment.id), epochs[0]), epochs[1] + 1):
        if not window.holds(epoch, segment.id):
            return [s for s in window.record(epoch).segments if s.overlaps(segment)]
    return []


# --- span and ordering (streamCutEqualOrAfter, compareStreamCuts) --------------------------------


def stream_cut_span(cut: Cut, window: EpochWindow) -> dict[SegmentRecord, int]:
    """Each cut segment with the highest epoch, within the cut's own epoch range, that holds it."""
    low, high = cut_epoch_range(cut)
    span: dict[SegmentRecord, int] = {}
    for segment in cut:
        record = window.find(segment)
        epoch = next((e for e in range(high, low - 1, -1) if window.holds(e, segment)), None)
        if record is None or epoch is None:
            raise InvalidInput(f"segment {segment} is not part of the stream")
        span[record] = epoch
    return span


def epoch_span(record: EpochRecord) -> dict[SegmentRecord, int]:
    """The span of a whole epoch: the head of an untruncated stream, or the active epoch."""
    return {s: record.epoch for s in record.segments}


def span_ids(span: Span) -> dict[int, int]:
    """A span as stored in a truncation record: segment id -> epoch."""
    return {s.id: epoch for s, epoch in span.items()}


def resolve_span(stored: Mapping[int, int], window: EpochWindow) -> dict[SegmentRecord, int]:
    """A stored span (segment id -> epoch) with its segment records looked up in the window."""
    span: dict[SegmentRecord, int] = {}
    for segment, epoch in stored.items():
        record = window.find(segment)
        if record is None:
            raise InvalidInput(f"segment {segment} of the stored span is not in the fetched epochs")
        span[record] = epoch
    return span


def cut_equal_or_after(cut_a: Cut, span_a: Span, cut_b: Cut, span_b: Span) -> bool:
    """Whether A is nowhere behind B: no shared segment at a lower offset, and no overlapping
    segment held in an older epoch."""
    return not any(
        (a.id == b.id and cut_a[a.id] < cut_b[b.id]) or (a.overlaps(b) and epoch_a < epoch_b)
        for a, epoch_a in span_a.items()
        for b, epoch_b in span_b.items()
    )


class CutVerdict(enum.Enum):
    """Why a cut cannot become the new truncation point."""

    INVALID = "invalid"  # not a valid stream cut, or it names no segment of the stream
    BEHIND = "behind"  # not equal to or after the current truncation point


def new_truncation_span(previous: TruncationRecord, cut: Cut, window: EpochWindow) -> Span | CutVerdict:
    """The span of `cut` when it may become the next truncation point (valid, and equal
    to or after the previous truncation cut); else why not. `window` must cover the epochs of
    both cuts."""
    try:
        if not is_stream_cut_valid(cut, window):
            return CutVerdict.INVALID
        span = stream_cut_span(cut, window)
        if previous.stream_cut and not cut_equal_or_after(
            cut, span, previous.stream_cut, resolve_span(previous.span, window)
        ):
            return CutVerdict.BEHIND
    except InvalidInput:
        return CutVerdict.INVALID
    return span


def compare_stream_cuts(
    cut_a: Cut, segments_a: Collection[SegmentRecord], cut_b: Cut, segments_b: Collection[SegmentRecord]
) -> CutOrder:
    """Three-way order of A against B over overlapping pairs: offsets for a shared segment, ids
    otherwise. Spans can be passed as the segment collections."""
    greater = less = False
    for a in segments_a:
        for b in segments_b:
            if a.id == b.id:
                difference = cut_a[a.id] - cut_b[b.id]
            elif a.overlaps(b):
                difference = a.id - b.id
            else:
                continue
            greater = greater or difference > 0
            less = less or difference < 0
    if less and not greater:
        return CutOrder.BEFORE
    return CutOrder.OVERLAPS if less else CutOrder.EQUAL_OR_AFTER


# --- between two cuts: segments (getSegmentsBetween) and bytes -----------------------------------


def segments_between(from_span: Span | None, to_span: Span | None, window: EpochWindow) -> set[SegmentRecord]:
    """Segments from `from_span` up to `to_span`, both included. None means the epoch-0 segments
    (from) or the window's last epoch, which must then be the active one (to)."""
    start = from_span if from_span is not None else epoch_span(window.record(0))
    stop = to_span if to_span is not None else epoch_span(window.record(window.high))
    from_high, to_low = max(start.values()), min(stop.values())
    between: set[SegmentRecord] = set()
    for epoch in range(min(start.values()), max(stop.values()) + 1):
        # An epoch lying wholly between the two cuts is inside by construction (all its segments count).
        for segment in window.record(epoch).segments:
            if from_high <= epoch <= to_low or _inside(segment, start, stop):
                between.add(segment)
    return between


def _inside(segment: SegmentRecord, start: Span, stop: Span) -> bool:
    return all(f.id <= segment.id for f in start if f.overlaps(segment)) and all(
        segment.id <= t.id for t in stop if t.overlaps(segment)
    )


def segments_between_cuts(from_cut: Cut, to_cut: Cut, window: EpochWindow) -> set[SegmentRecord]:
    """getSegmentsBetween: an empty cut means epoch 0 / the active epoch, not both; `to` must be
    equal-or-after `from`. The window must cover `between_epoch_range`."""
    if not from_cut and not to_cut:
        raise InvalidInput("at least one of the stream cuts must be given")
    from_span = stream_cut_span(from_cut, window) if from_cut else None
    to_span = stream_cut_span(to_cut, window) if to_cut else None
    if (
        from_span is not None
        and to_span is not None
        and not cut_equal_or_after(to_cut, to_span, from_cut, from_span)
    ):
        raise InvalidInput("the 'to' stream cut is behind the 'from' stream cut")
    return segments_between(from_span, to_span, window)


def size_between(
    from_cut: Cut, to_cut: Cut, segments: Iterable[SegmentRecord], sealed_sizes: Mapping[int, int]
) -> int:
    """Bytes from `from_cut` to `to_cut` over `segments`; negative offsets and unknown sizes count 0."""
    total = 0
    for segment in segments:
        start = max(from_cut.get(segment.id, 0), 0)
        if segment.id in to_cut:
            total += max(to_cut[segment.id], 0) - start
        else:
            total += max(sealed_sizes.get(segment.id, 0), 0) - start
    return total


# --- truncation (the next truncation record) -----------------------------------------------------


def completed_truncation(record: TruncationRecord) -> TruncationRecord:
    """The record once its segments are deleted (StreamTruncationRecord.complete): what was to be
    deleted joins what was deleted, so the set of deleted segments only ever grows."""
    return dataclasses.replace(
        record,
        deleted_segments=record.deleted_segments | record.to_delete,
        to_delete=frozenset(),
        updating=False,
    )


def next_truncation(
    previous: TruncationRecord,
    new_cut: Cut,
    new_span: Span,
    window: EpochWindow,
    sealed_sizes: Mapping[int, int],
) -> TruncationRecord:
    """The in-progress record for truncating at `new_cut`, already checked valid and not behind
    `previous`. The window must cover `truncation_epoch_range`; `sealed_sizes` the segments in it."""
    if previous.updating:
        raise IllegalState("a truncation is already in progress")
    old_span = resolve_span(previous.span, window) if previous.span else None
    between = segments_between(old_span, new_span, window)
    to_delete = {s.id for s in between} - set(new_cut) - previous.deleted_segments
    return TruncationRecord(
        stream_cut=dict(new_cut),
        span=span_ids(new_span),
        deleted_segments=previous.deleted_segments,
        to_delete=frozenset(to_delete),
        size_till=previous.size_till + size_between(previous.stream_cut, new_cut, between, sealed_sizes),
        updating=True,
    )
