"""Watermark rules against Pravega's controller and its WatermarkWorkflowTest:
the noteTimestamp table, who takes part in a round, and the stream-cut upper bound."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from app.domain.ids import segment_id
from app.domain.records import SegmentRecord
from app.domain.scaling import initial_segments
from app.domain.watermarks import (
    NO_TIME,
    CutDraft,
    NoteOutcome,
    SegmentRange,
    TrackedMark,
    Watermark,
    WriterMark,
    add_to_upper_bound,
    complete_cut,
    draft_cut,
    is_participating,
    latest_commit_times,
    missing_ranges,
    needs_epoch,
    note_decision,
    plan_round,
)


def ranges(segments: tuple[SegmentRecord, ...]) -> dict[int, SegmentRange]:
    return {s.id: SegmentRange(s.id, s.key_start, s.key_end) for s in segments}


# Epoch 0: three uniform segments 0, 1, 2; epoch 1 (after scaling all three): 3 [0, .5), 4 [.5, 1).
E0 = ranges(initial_segments(3, 0, 0))
S3 = SegmentRange(segment_id(3, 1), 0.0, 0.5)
S4 = SegmentRange(segment_id(4, 1), 0.5, 1.0)
E1 = {S3.segment: S3, S4.segment: S4}
ALL = {**E0, **E1}


def pos(**offsets: int) -> dict[SegmentRange, int]:
    """pos(s0=100, s3=5): a position over the named segments of E0/E1."""
    return {ALL[_id(name)]: offset for name, offset in offsets.items()}


def _id(name: str) -> int:
    number = int(name[1:])
    return number if number < 3 else segment_id(number, 1)


def plain(cut: Mapping[SegmentRange, int]) -> dict[int, int]:
    return {s.segment: offset for s, offset in cut.items()}


def compute(
    positions: list[dict[SegmentRange, int]], previous: Watermark | None, epoch: dict[int, SegmentRange]
) -> dict[int, int]:
    draft = draft_cut(positions, previous)
    return plain(complete_cut(draft, tuple(epoch.values())))


# --- noteTimestamp --------------------------------------------------------------------------------


def test_first_mark_is_accepted_whatever_it_says() -> None:
    assert note_decision(None, NO_TIME, {}) is NoteOutcome.SUCCESS
    assert note_decision(None, 5, {0: -1}) is NoteOutcome.SUCCESS


@pytest.mark.parametrize(
    ("timestamp", "position", "expected"),
    [
        (99, {0: 100}, NoteOutcome.INVALID_TIME),
        (99, {0: 1}, NoteOutcome.INVALID_TIME),  # time is checked first
        (100, {0: 100, 1: 50}, NoteOutcome.SUCCESS),  # equal time and offsets are fine
        (101, {0: 99}, NoteOutcome.INVALID_POSITION),
        (101, {1: 49, 7: 0}, NoteOutcome.INVALID_POSITION),
        (101, {0: 150, 1: 49}, NoteOutcome.INVALID_POSITION),
        (101, {2: 0, 3: 7}, NoteOutcome.SUCCESS),  # disjoint positions always pass
        (101, {}, NoteOutcome.SUCCESS),
        (101, {0: 101, 1: 51, 9: 0}, NoteOutcome.SUCCESS),
    ],
)
def test_note_decision_table(timestamp: int, position: dict[int, int], expected: NoteOutcome) -> None:
    previous = WriterMark(100, {0: 100, 1: 50})
    assert note_decision(previous, timestamp, position) is expected


def test_a_removed_writer_may_note_again() -> None:
    assert note_decision(WriterMark(100, {0: 1}, alive=False), 100, {0: 1}) is NoteOutcome.SUCCESS


def test_latest_commit_time_per_writer() -> None:
    commits = [("a", 5), ("b", 1), ("a", 9), ("a", 7), ("", 100), ("b", 1)]
    assert latest_commit_times(commits) == {"a": 9, "b": 1}


# --- who takes part ---------------------------------------------------------------------------


def mark(writer: str, time: int, *, alive: bool = True, since: int | None = None) -> TrackedMark:
    return TrackedMark(writer, WriterMark(time, {}, alive), since, version=3)


W100 = Watermark(100, 102, {})


def test_without_a_previous_watermark_everyone_participates() -> None:
    plan = plan_round([mark("a", 5), mark("b", 3, alive=False)], None, 0, 1_000)
    assert [t.writer for t in plan.active] == ["a", "b"]
    assert plan.emit and (plan.lower_time_bound, plan.upper_time_bound) == (3, 5)
    assert not plan.inactive and not plan.start_tracking and not plan.stop_tracking


def test_participating_means_strictly_after_the_previous_lower_bound() -> None:
    assert is_participating(NO_TIME, None)
    assert not is_participating(100, W100)
    assert is_participating(101, W100)


def test_default_timeout_makes_a_non_participating_writer_inactive_at_once() -> None:
    plan = plan_round([mark("a", 200), mark("b", 100)], W100, 0, 1_000)
    assert [t.writer for t in plan.active] == ["a"]
    assert [t.writer for t in plan.inactive] == ["b"]
    assert plan.emit and plan.lower_time_bound == 200


def test_a_waiting_writer_blocks_the_watermark_until_its_timeout() -> None:
    marks = [mark("a", 200), mark("b", 100)]
    first = plan_round(marks, W100, 5_000, 1_000)
    assert [t.writer for t in first.active] == ["a", "b"]
    assert [t.writer for t in first.start_tracking] == ["b"]
    assert not first.emit and not first.inactive

    tracked = [mark("a", 200), mark("b", 100, since=1_000)]
    assert not plan_round(tracked, W100, 5_000, 5_999).emit
    late = plan_round(tracked, W100, 5_000, 6_000)
    assert [t.writer for t in late.inactive] == ["b"]
    assert late.emit and late.lower_time_bound == 200 and not late.start_tracking


def test_a_removed_writer_is_inactive_once_it_stops_participating() -> None:
    # Participating, it still counts (Java's isWriterActive checks `alive` only when behind).
    counted = plan_round([mark("a", 200, alive=False)], W100, 60_000, 1_000)
    assert counted.emit and [t.writer for t in counted.active] == ["a"]
    behind = plan_round([mark("a", 100, alive=False), mark("b", 300)], W100, 60_000, 1_000)
    assert [t.writer for t in behind.inactive] == ["a"]
    assert behind.emit and behind.lower_time_bound == 300


def test_a_tracked_writer_that_participates_again_is_untracked() -> None:
    plan = plan_round([mark("a", 150, since=10)], W100, 60_000, 1_000)
    assert [t.writer for t in plan.stop_tracking] == ["a"] and plan.emit


def test_no_active_writer_leaves_the_bucket() -> None:
    assert plan_round([], None, 0, 0).leaves_bucket
    plan = plan_round([mark("a", 100), mark("b", 50, alive=False)], W100, 0, 0)
    assert plan.leaves_bucket and not plan.emit and len(plan.inactive) == 2


def test_time_not_past_the_previous_lower_bound_emits_nothing() -> None:
    # Reachable only with NO_TIME marks and no watermark: Pravega's EMPTY compares equal.
    assert not plan_round([mark("a", NO_TIME)], None, 0, 0).emit


# --- the stream-cut upper bound -----------------------------------------------------------------


def test_testWatermarkingWorkflow_example() -> None:
    # Round 1: three writers over three segments.
    first = compute(
        [pos(s0=100, s1=200), pos(s1=100, s2=200), pos(s2=100, s0=200)],
        None,
        E0,
    )
    assert first == {0: 200, 1: 200, 2: 200}
    w1 = Watermark(100, 102, {E0[k]: v for k, v in first.items()})

    # Round 2: nothing reported on segment 0; the previous cut keeps it at 200.
    second = compute([pos(s1=300), pos(s1=100, s2=300), pos(s2=300)], w1, E0)
    assert second == {0: 200, 1: 300, 2: 300}
    w2 = Watermark(200, 202, {E0[k]: v for k, v in second.items()})

    # Scale 0, 1, 2 -> 3, 4; writer 3 reports on segment 3 only: the gap is filled with 4 at 0.
    third = compute([pos(s0=300, s1=400), pos(s1=100, s2=400), pos(s3=100)], w2, E1)
    assert third == {S3.segment: 100, S4.segment: 0}
    w3 = Watermark(300, 302, {ALL[k]: v for k, v in third.items()})

    # Writers 1 and 2 only (writer 3 shut down): the previous cut is already ahead.
    fourth = compute([pos(s0=400, s1=400), pos(s1=100, s2=400)], w3, E1)
    assert fourth == {S3.segment: 100, S4.segment: 0}
    w4 = Watermark(400, 401, {ALL[k]: v for k, v in fourth.items()})

    # Writer 3 comes back on segment 4.
    fifth = compute([pos(s0=500, s1=500), pos(s1=100, s2=500), pos(s4=500)], w4, E1)
    assert fifth == {S3.segment: 100, S4.segment: 500}


def test_testWriterTimeout_cut() -> None:
    w = Watermark(100, 102, {E0[0]: 100, E0[1]: 100, E0[2]: 100})
    cut = compute([pos(s0=200, s1=0, s2=0), pos(s0=0, s1=200, s2=0)], w, E0)
    assert cut == {0: 200, 1: 200, 2: 100}


def test_a_successor_replaces_its_predecessors_and_a_predecessor_after_it_is_dropped() -> None:
    upper: dict[SegmentRange, int] = {}
    add_to_upper_bound(pos(s0=10, s1=20, s2=30), upper)
    add_to_upper_bound(pos(s3=5), upper)  # overlaps 0 and 1
    assert plain(upper) == {2: 30, S3.segment: 5}
    add_to_upper_bound(pos(s0=999, s1=999), upper)  # already succeeded by 3
    assert plain(upper) == {2: 30, S3.segment: 5}
    add_to_upper_bound(pos(s3=4, s2=31), upper)  # max offset per segment
    assert plain(upper) == {2: 31, S3.segment: 5}


def test_the_cut_never_regresses_behind_the_previous_watermark() -> None:
    previous = Watermark(10, 10, {E0[0]: 500, E0[1]: 500, E0[2]: 500})
    assert compute([pos(s0=1, s1=2, s2=3)], previous, E0) == {0: 500, 1: 500, 2: 500}
    # An older cut than the writers' (segments they have moved past) is superseded, not mixed in.
    assert compute([pos(s3=7, s4=8)], previous, E1) == {S3.segment: 7, S4.segment: 8}


def test_gaps_are_filled_from_the_highest_epoch_at_offset_zero() -> None:
    draft = draft_cut([pos(s3=7)], None)
    assert draft.gaps == ((0.5, 1.0),) and draft.highest_epoch == 1 and needs_epoch(draft)
    assert plain(complete_cut(draft, (S3, S4))) == {S3.segment: 7, S4.segment: 0}


def test_filling_repeats_until_no_gap_is_left() -> None:
    # Epoch 2 splits [0, 1) in four. The writers cover the key space with epoch 0; one segment
    # of epoch 2 arrives through the previous watermark, its predecessors go and gaps open that
    # the writers' bound did not have; each pass fills them, which opens the next.
    quarters = [SegmentRange(segment_id(5 + i, 2), i / 4, (i + 1) / 4) for i in range(4)]
    previous = Watermark(1, 1, {quarters[1]: 40})
    draft = draft_cut([pos(s0=10, s1=10, s2=10)], previous)
    assert draft.gaps == () and draft.highest_epoch == 2 and needs_epoch(draft)
    assert plain(draft.cut) == {2: 10, quarters[1].segment: 40}
    cut = plain(complete_cut(draft, tuple(quarters)))
    assert cut == {
        quarters[0].segment: 0,
        quarters[1].segment: 40,
        quarters[2].segment: 0,
        quarters[3].segment: 0,
    }


def test_a_key_space_ending_short_of_one_does_not_loop_forever() -> None:
    segments = ranges(initial_segments(49, 0, 0))
    last = max(segments.values(), key=lambda s: s.high)
    assert last.high == 0.9999999999999999
    draft = draft_cut([{last: 5}], None)
    cut = plain(complete_cut(draft, tuple(segments.values())))
    assert cut == {**{sid: 0 for sid in segments}, last.segment: 5}


def test_no_gap_needs_no_epoch() -> None:
    draft = draft_cut([pos(s0=1, s1=1, s2=1)], None)
    assert draft.gaps == () and not needs_epoch(draft)
    assert plain(complete_cut(draft, ())) == {0: 1, 1: 1, 2: 1}


def test_empty_positions_take_the_previous_cut() -> None:
    previous = Watermark(1, 1, {S3: 3, S4: 4})
    draft = draft_cut([{}, {}], previous)
    assert plain(complete_cut(draft, (S3, S4))) == {S3.segment: 3, S4.segment: 4}
    assert draft_cut([{}], None) == CutDraft({}, ((0.0, 1.0),))


def test_missing_ranges() -> None:
    assert missing_ranges({}) == [(0.0, 1.0)]
    assert missing_ranges(pos(s1=0)) == [(0.0, E0[1].low), (E0[1].high, 1.0)]
    assert missing_ranges(pos(s0=0, s1=0, s2=0)) == []
    assert missing_ranges(pos(s0=0, s4=0)) == [(E0[0].high, 0.5)]


def test_segment_ranges_are_equal_by_id() -> None:
    assert SegmentRange(7, 0.0, 0.5) == SegmentRange(7, 0.1, 0.2)
    assert {SegmentRange(7, 0.0, 0.5): 1}[SegmentRange(7, 0.0, 0.0)] == 1
    assert S4.epoch == 1 and E0[2].epoch == 0
