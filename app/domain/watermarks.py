"""Watermark rules (Pravega's), pure: the noteTimestamp decision table, which writers take
part in a round and which have gone quiet, and the stream-cut upper bound a watermark carries.

Invariant: a watermark only moves forward. Its lower time bound is strictly past the previous
one's, and its cut is folded over the previous cut, so a reader's time window never goes back.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.domain.ids import epoch_of

KeyRange = tuple[float, float]

# Pravega's Watermark.EMPTY: no previous watermark compares as the lowest possible time.
NO_TIME = -(2**63)
KEY_SPACE = (0.0, 1.0)


class NoteOutcome(enum.Enum):
    """What noteTimestampFromWriter answers (the wire's TimestampResponse.Status)."""

    SUCCESS = "SUCCESS"
    INVALID_TIME = "INVALID_TIME"
    INVALID_POSITION = "INVALID_POSITION"


class RemoveOutcome(enum.Enum):
    """What removeWriter answers (the wire's RemoveWriterResponse.Status)."""

    SUCCESS = "SUCCESS"
    UNKNOWN_WRITER = "UNKNOWN_WRITER"
    INTERNAL_ERROR = "INTERNAL_ERROR"


@dataclass(frozen=True, slots=True)
class WriterMark:
    """A writer's last report: its time and its position (segment id -> offset)."""

    timestamp: int
    position: Mapping[int, int]
    alive: bool = True


def note_decision(previous: WriterMark | None, timestamp: int, position: Mapping[int, int]) -> NoteOutcome:
    """noteTimestamp: time may stay equal but not go back; a segment in both positions may not go back.
    Java's compareWriterPositions compares the same maximum twice, so only offsets count."""
    if previous is None:
        return NoteOutcome.SUCCESS
    if previous.timestamp > timestamp:
        return NoteOutcome.INVALID_TIME
    if any(
        offset < previous.position[segment]
        for segment, offset in position.items()
        if segment in previous.position
    ):
        return NoteOutcome.INVALID_POSITION
    return NoteOutcome.SUCCESS


def latest_commit_times(commits: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Each writer's latest commit time among the (writer, commit time) pairs of a committed batch."""
    latest: dict[str, int] = {}
    for writer, commit_time in commits:
        if writer and (writer not in latest or latest[writer] < commit_time):
            latest[writer] = commit_time
    return latest


# --- segments and watermarks ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class SegmentRange:
    """A segment with its key range (Pravega's SegmentWithRange). Equal by id: a segment's range
    never changes, so the id alone keys a cut."""

    segment: int
    low: float
    high: float

    # Written out rather than generated: a round hashes these a few hundred thousand times.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentRange) and other.segment == self.segment

    def __hash__(self) -> int:
        return hash(self.segment)

    @property
    def epoch(self) -> int:
        return epoch_of(self.segment)

    def overlaps(self, other: SegmentRange) -> bool:
        return self.low < other.high and self.high > other.low

    def overlaps_range(self, key_range: KeyRange) -> bool:
        return self.low < key_range[1] and self.high > key_range[0]


Cut = dict[SegmentRange, int]


@dataclass(frozen=True, slots=True)
class Watermark:
    lower_time_bound: int
    upper_time_bound: int
    stream_cut: Mapping[SegmentRange, int]


@dataclass(frozen=True, slots=True)
class MarkEntry:
    """A watermark as an entry of its stream's `_MARK` segment: where its Event starts and ends
    (the end is Pravega's revision of the entry, the offset the next conditional append names)."""

    start: int
    end: int
    watermark: Watermark


# --- who takes part in a round, who has gone quiet ----------------------------------------------


@dataclass(frozen=True, slots=True)
class TrackedMark:
    """A stored mark with what the round needs: since when the writer has been seen not
    participating (None: it was not), and the version a conditional write presents."""

    writer: str
    mark: WriterMark
    inactive_since: int | None = None
    version: int = 0


def is_participating(timestamp: int, previous: Watermark | None) -> bool:
    return previous is None or timestamp > previous.lower_time_bound


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One stream's round, decided from its marks and its latest watermark."""

    active: tuple[TrackedMark, ...]
    # Inactive writers: removed, each only if its mark is still the one read.
    inactive: tuple[TrackedMark, ...]
    # Active but not participating, seen so for the first time: inactivity is timed from now.
    start_tracking: tuple[TrackedMark, ...]
    # Participating again after having been tracked.
    stop_tracking: tuple[TrackedMark, ...]
    lower_time_bound: int
    upper_time_bound: int
    emit: bool

    @property
    def leaves_bucket(self) -> bool:
        """Step 5: with no active writer the stream stops being watermarked until a new mark."""
        return not self.active


def plan_round(
    marks: Sequence[TrackedMark], previous: Watermark | None, timeout_ms: int, now_ms: int
) -> RoundPlan:
    """Steps 2-7. A non-participating writer stays active while it is alive and its
    non-participation (timed from the first round that saw it) is shorter than the stream's
    timestampAggregationTimeout; 0 makes it inactive at once. A participating writer is active
    even after removeWriter, as in Java: its report still counts for this round."""
    active: list[TrackedMark] = []
    inactive: list[TrackedMark] = []
    start: list[TrackedMark] = []
    stop: list[TrackedMark] = []
    all_participating = True
    for tracked in marks:
        if is_participating(tracked.mark.timestamp, previous):
            active.append(tracked)
            if tracked.inactive_since is not None:
                stop.append(tracked)
            continue
        since = now_ms if tracked.inactive_since is None else tracked.inactive_since
        if tracked.mark.alive and now_ms - since < timeout_ms:
            active.append(tracked)
            all_participating = False
            if tracked.inactive_since is None:
                start.append(tracked)
        else:
            inactive.append(tracked)
    times = [t.mark.timestamp for t in active]
    low = min(times, default=NO_TIME)
    high = max(times, default=NO_TIME)
    previous_low = NO_TIME if previous is None else previous.lower_time_bound
    return RoundPlan(
        active=tuple(active),
        inactive=tuple(inactive),
        start_tracking=tuple(start),
        stop_tracking=tuple(stop),
        lower_time_bound=low,
        upper_time_bound=high,
        emit=bool(active) and all_participating and low > previous_low,
    )


# --- the stream-cut upper bound ------------------------------------------------------------------


def add_to_upper_bound(position: Mapping[SegmentRange, int], upper: Cut) -> None:
    """Folds one position into `upper`: the max offset per segment; a segment whose successor
    (overlapping, higher id) is included already is dropped; adding one removes its included
    predecessors. Order-sensitive like Java's addToUpperBound, and equally deterministic."""
    for segment, offset in position.items():
        if segment in upper:
            upper[segment] = max(offset, upper[segment])
        elif not any(segment.overlaps(x) and segment.segment < x.segment for x in upper):
            for predecessor in [x for x in upper if segment.overlaps(x) and segment.segment > x.segment]:
                del upper[predecessor]
            upper[segment] = offset


def missing_ranges(cut: Mapping[SegmentRange, int]) -> list[KeyRange]:
    """Key ranges of [0, 1) no segment of the cut covers (Java's findMissingRanges)."""
    if not cut:
        return [KEY_SPACE]
    ordered = sorted(cut, key=lambda s: s.low)
    gaps: list[KeyRange] = []
    if ordered[0].low > KEY_SPACE[0]:
        gaps.append((KEY_SPACE[0], ordered[0].low))
    for before, after in itertools.pairwise(ordered):
        if before.high < after.low:
            gaps.append((before.high, after.low))
    if ordered[-1].high < KEY_SPACE[1]:
        gaps.append((ordered[-1].high, KEY_SPACE[1]))
    return gaps


@dataclass(frozen=True, slots=True)
class CutDraft:
    """The writers' upper bound with the previous watermark's cut folded in, and the gaps to
    fill. Java measures the first gaps before folding the previous cut; so do we."""

    cut: Mapping[SegmentRange, int]
    gaps: tuple[KeyRange, ...]

    @property
    def highest_epoch(self) -> int | None:
        """The epoch whose segments fill the gaps: the highest creation epoch in the cut."""
        return max((s.epoch for s in self.cut), default=None)


def draft_cut(positions: Iterable[Mapping[SegmentRange, int]], previous: Watermark | None) -> CutDraft:
    upper: Cut = {}
    for position in positions:
        add_to_upper_bound(position, upper)
    gaps = missing_ranges(upper)
    if previous is not None:
        add_to_upper_bound(previous.stream_cut, upper)
    return CutDraft(dict(upper), tuple(gaps))


def complete_cut(draft: CutDraft, epoch_segments: Sequence[SegmentRange]) -> Cut:
    """Fills the draft's gaps with the overlapping segments of its highest epoch at offset 0,
    until none is left. A gap no segment overlaps (a key space ending at 0.9999999999999999)
    stays: Java would loop forever on it."""
    cut: Cut = dict(draft.cut)
    gaps = list(draft.gaps)
    fresh = False
    while True:
        fillers = {s: 0 for s in epoch_segments if s not in cut and any(s.overlaps_range(g) for g in gaps)}
        if fillers:
            add_to_upper_bound(fillers, cut)
        elif fresh:
            return cut
        # Like Java's do-while: the first pass fills the gaps measured before the previous cut
        # was folded in, every later pass the gaps of the cut as it now stands.
        gaps = missing_ranges(cut)
        fresh = True
        if not gaps:
            return cut


def needs_epoch(draft: CutDraft) -> bool:
    """Whether completing the draft needs its highest epoch's segments."""
    return bool(draft.gaps) or bool(missing_ranges(draft.cut))
