"""Scale rules as pure functions: validate a request, compute its transition and the epoch it creates.

Key ranges are IEEE doubles compared exactly, as Pravega's controller does.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from app.domain.errors import IllegalState, InvalidInput
from app.domain.ids import epoch_of, number_of, segment_id
from app.domain.records import (
    EpochRecord,
    EpochTransitionRecord,
    ScaleType,
    SegmentRecord,
    StreamConfig,
    StreamState,
)
from app.domain.scaling import uniform_key_ranges

KeyRange = tuple[float, float]

AUTO_SCALE_EVENT_VALIDITY_MS = 10 * 60 * 1000
COLD_FOREVER = 2**63 - 1  # Java's Long.MAX_VALUE: a silent DOWN event marks the segment cold for good


# region manual and auto scale submission (Pravega's submitScale)


class ScaleCheck(enum.Enum):
    OK = "OK"
    INVALID_RANGES = "INVALID_RANGES"  # ScaleResponse.FAILURE
    PRECONDITION_FAILED = "PRECONDITION_FAILED"  # ScaleResponse.PRECONDITION_FAILED


def validate_scale(
    active: EpochRecord,
    to_seal: Collection[int],
    new_ranges: Sequence[KeyRange],
    min_num_segments: int,
) -> ScaleCheck:
    """Segments to seal all active, ranges replacing them exactly, at least the minimum segment count
    left: in Java's order, for a submission that found no pending transition."""
    # One set of ids, not a scan of the epoch per sealed segment: that is quadratic, and a scale
    # of 10,000 segments held the event loop for seconds.
    active_ids = {segment.id for segment in active.segments}
    if not all(segment in active_ids for segment in to_seal):
        return ScaleCheck.PRECONDITION_FAILED
    if not ranges_replace_sealed(active, to_seal, new_ranges):
        return ScaleCheck.INVALID_RANGES
    if len(active.segments) - len(to_seal) + len(new_ranges) < min_num_segments:
        return ScaleCheck.PRECONDITION_FAILED
    return ScaleCheck.OK


def ranges_replace_sealed(
    active: EpochRecord, to_seal: Iterable[int], new_ranges: Sequence[KeyRange]
) -> bool:
    """True when the new ranges cover exactly the key space of the sealed segments, no more, no less."""
    # Java lets a range with end <= 0 through, so (0.0, 0.0) can be accepted when listed before the range
    # starting at 0.0; an empty key range is never meaningful, so every range must have start < end.
    if not all(start < end for start, end in new_ranges):
        return False
    by_id = {segment.id: segment for segment in active.segments}
    sealed = [(by_id[s].key_start, by_id[s].key_end) for s in to_seal if s in by_id]
    return _exact(_union(sealed)) == _exact(_union(new_ranges))


def etr_matches(etr: EpochTransitionRecord, to_seal: Iterable[int], new_ranges: Iterable[KeyRange]) -> bool:
    """Whether a resubmission asks for nothing the pending transition lacks (a subset test, not equality)."""
    pending = {_exact_range(start, end) for _, start, end in etr.new_segments}
    return all(_exact_range(start, end) in pending for start, end in new_ranges) and all(
        segment in etr.segments_to_seal for segment in to_seal
    )


def compute_epoch_transition(
    active: EpochRecord, to_seal: Iterable[int], new_ranges: Sequence[KeyRange], time: int
) -> EpochTransitionRecord:
    """The transition that seals `to_seal` and creates one segment per range in the next epoch."""
    sealed = frozenset(to_seal)
    _require_in_epoch(active, sealed)
    if not active.segments:
        raise IllegalState(f"epoch {active.epoch} has no segments to scale")
    new_epoch = active.epoch + 1
    first_number = max(segment.number for segment in active.segments) + 1
    # Java numbers ranges in HashMap order; ascending start is deterministic and agrees with its tests.
    ordered = sorted(new_ranges, key=lambda r: r[0])
    created = tuple(
        (segment_id(first_number + i, new_epoch), start, end) for i, (start, end) in enumerate(ordered)
    )
    return EpochTransitionRecord(active.epoch, time, sealed, created)


# endregion

# region running the scale (Pravega's ScaleOperationTask)


@dataclass(frozen=True, slots=True)
class EpochChange:
    """The epoch record a scale writes, with its history entry: the ids it seals and creates."""

    record: EpochRecord
    sealed: tuple[int, ...]
    created: tuple[int, ...]


def new_epoch_record(active: EpochRecord, etr: EpochTransitionRecord) -> EpochChange:
    """The epoch created by `etr` on top of `active`; the caller skips this once that epoch exists."""
    if etr.active_epoch != active.epoch:
        raise IllegalState(f"transition from epoch {etr.active_epoch} cannot apply to epoch {active.epoch}")
    _require_in_epoch(active, etr.segments_to_seal)
    # Epoch creation times must grow strictly so that a time always names one epoch.
    time = max(etr.time, active.creation_time + 1)
    created = tuple(
        SegmentRecord(number_of(sid), epoch_of(sid), time, start, end) for sid, start, end in etr.new_segments
    )
    kept = tuple(s for s in active.segments if s.id not in etr.segments_to_seal)
    segments = kept + created
    record = EpochRecord(
        epoch=etr.new_epoch,
        reference_epoch=etr.new_epoch,
        segments=segments,
        creation_time=time,
        splits=active.splits + _spread_count(active.segments, segments),
        merges=active.merges + _spread_count(segments, active.segments),
    )
    sealed = tuple(s.id for s in active.segments if s.id in etr.segments_to_seal)
    return EpochChange(record, sealed, tuple(s.id for s in created))


def migrate_transition(
    etr: EpochTransitionRecord, submitted_on: EpochRecord, active: EpochRecord, *, manual: bool
) -> EpochTransitionRecord | None:
    """The transition to run at "startScale"; None means discard it and fail the scale.

    `submitted_on` is the epoch record of `etr.active_epoch`.
    """
    if submitted_on.epoch != etr.active_epoch:
        raise IllegalState(f"epoch {submitted_on.epoch} is not the transition's epoch {etr.active_epoch}")
    if not manual:
        return etr if etr.new_epoch > active.epoch else None
    if etr.active_epoch == active.epoch:
        return etr
    if active.epoch > etr.active_epoch and active.reference_epoch == submitted_on.reference_epoch:
        # A rolling txn copied the epoch: same numbers and ranges, ids relabelled with the duplicate epoch.
        relabelled = [segment_id(number_of(s), active.epoch) for s in etr.segments_to_seal]
        ranges = [(start, end) for _, start, end in etr.new_segments]
        return compute_epoch_transition(active, relabelled, ranges, etr.time)
    return None


class ScaleStatus(enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    SUCCESS = "SUCCESS"
    INVALID_INPUT = "INVALID_INPUT"


def check_scale(
    requested_epoch: int, active: EpochRecord, state: StreamState, etr: EpochTransitionRecord | None
) -> ScaleStatus:
    """Whether the scale submitted on `requested_epoch` has completed (checkScale); `etr` None: none."""
    if requested_epoch < 0:
        raise InvalidInput(f"epoch must not be negative, got {requested_epoch}")
    if requested_epoch > active.epoch:
        return ScaleStatus.INVALID_INPUT
    if requested_epoch in (active.epoch, active.reference_epoch):
        return ScaleStatus.IN_PROGRESS
    # The epoch pointer has moved but the workflow has not yet put the state back to ACTIVE.
    if (
        requested_epoch + 1 == active.reference_epoch
        and state is StreamState.SCALING
        and (etr is None or etr.new_epoch == active.epoch)
    ):
        return ScaleStatus.IN_PROGRESS
    return ScaleStatus.SUCCESS


# endregion

# region scales that other workflows request (auto-scaling, configuration updates)


def segment_count_update(new_config: StreamConfig, active: EpochRecord) -> list[KeyRange] | None:
    """The ranges replacing every active segment when a config update changes the count; None = no scale."""
    policy = new_config.scaling
    count = len(active.segments)
    wanted = policy.min_num_segments
    if (policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS and count != wanted) or count < wanted:
        return uniform_key_ranges(wanted)
    return None


def auto_scale_event_expired(timestamp: int, now: int) -> bool:
    return timestamp + AUTO_SCALE_EVENT_VALIDITY_MS <= now


def cold_marker_until(timestamp: int, silent: bool) -> int:
    return COLD_FOREVER if silent else timestamp + AUTO_SCALE_EVENT_VALIDITY_MS


def is_cold(marker: int | None, now: int) -> bool:
    return marker is not None and marker > now


def split_ranges(segment: SegmentRecord, num_of_splits: int, scale_factor: int) -> list[KeyRange]:
    """The pieces an UP event cuts `segment` into: at least 2, at most max(2, scale_factor)."""
    pieces = min(max(2, num_of_splits), max(2, scale_factor))
    start, end = segment.key_start, segment.key_end
    delta = (end - start) / pieces
    # Neighbours share one computed double; the last end is the segment's own, as start + n*delta may miss it.
    bounds = [start + delta * i for i in range(pieces)] + [end]
    return [(bounds[i], bounds[i + 1]) for i in range(pieces)]


def merge_candidates(
    segment: int, active: EpochRecord, cold: AbstractSet[int], min_num_segments: int
) -> list[SegmentRecord]:
    """The segments a DOWN event on `segment` merges, sorted by key start; empty = just the cold mark.

    `cold` holds the ids whose marker is in the future, including the one this event has just written.
    """
    current = next((s for s in active.segments if s.id == segment), None)
    if current is None or len(active.segments) == min_num_segments:
        return []
    neighbourhood = sorted(
        (
            s
            for s in active.segments
            if s.key_end == current.key_start or s.key_start == current.key_end or s.id == segment
        ),
        key=lambda s: s.key_start,
    )
    if len(neighbourhood) < 2:
        return []
    chosen = [s for s in neighbourhood if s.id in cold]
    # One segment above the floor: merging three would go below it, so merge the lower pair only.
    if len(active.segments) - min_num_segments == 1 and len(chosen) == 3:
        chosen = chosen[:2]
    return chosen if len(chosen) >= 2 else []


def merged_range(segments: Sequence[SegmentRecord]) -> KeyRange:
    return min(s.key_start for s in segments), max(s.key_end for s in segments)


# endregion


def _union(ranges: Iterable[KeyRange]) -> list[KeyRange]:
    blocks: list[KeyRange] = []
    for start, end in sorted(ranges, key=lambda r: r[0]):
        if blocks and blocks[-1][1] == start:
            blocks[-1] = (blocks[-1][0], end)
        else:
            # Overlaps stay separate blocks, so they can never equal the union of real segments.
            blocks.append((start, end))
    return blocks


def _exact_range(start: float, end: float) -> tuple[str, str]:
    # Java's Double.equals compares bit patterns, so -0.0 is not 0.0; the hex form keeps every bit.
    return start.hex(), end.hex()


def _exact(ranges: Iterable[KeyRange]) -> list[tuple[str, str]]:
    return [_exact_range(start, end) for start, end in ranges]


def _require_in_epoch(epoch: EpochRecord, segments: AbstractSet[int]) -> None:
    missing = segments - {s.id for s in epoch.segments}
    if missing:
        raise IllegalState(f"segments {sorted(missing)} are not in epoch {epoch.epoch}")


def _spread_count(reference: Sequence[SegmentRecord], target: Sequence[SegmentRecord]) -> int:
    """How many reference segments overlap more than one target segment: splits forward, merges backward.

    Counted with two sorted lists in O((n + m) log m), not by testing every pair: an epoch holds up
    to MAX_SEGMENTS_PER_EPOCH segments, and pairs of two such epochs are 10^8 tests. For ranges with
    start < end, the targets overlapping r are those starting before r ends less those ending at or
    before r starts (the latter all start before r ends too)."""
    if not all(s.key_start < s.key_end for s in (*reference, *target)):
        # Not a real epoch (an empty or NaN range): count pair by pair, exactly as defined.
        return sum(1 for r in reference if sum(1 for t in target if t.overlaps(r)) > 1)
    starts = sorted(t.key_start for t in target)
    ends = sorted(t.key_end for t in target)
    return sum(1 for r in reference if bisect_left(starts, r.key_end) - bisect_right(ends, r.key_start) > 1)
