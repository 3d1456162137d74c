"""Stream-cut rules checked against examples from Pravega's controller and its tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import pytest

from app.domain.errors import IllegalState, InvalidInput
from app.domain.ids import segment_id
from app.domain.records import EpochRecord, SegmentRecord, TruncationRecord
from app.domain.scaling import initial_segments
from app.domain.streamcuts import (
    CutOrder,
    EpochWindow,
    between_epoch_range,
    compare_stream_cuts,
    completed_truncation,
    cut_epoch_range,
    cut_equal_or_after,
    epoch_span,
    is_stream_cut_valid,
    next_truncation,
    resolve_span,
    segments_between,
    segments_between_cuts,
    size_between,
    span_ids,
    stream_cut_span,
    successors_with_predecessors,
    truncation_epoch_range,
)


def seg(number: int, epoch: int) -> int:
    return segment_id(number, epoch)


class History:
    """Epoch records built the way a scale builds them: new numbers follow the active maximum,
    assigned in ascending key-start order."""

    def __init__(self, count: int) -> None:
        self.epochs = [EpochRecord(0, 0, initial_segments(count, 0, 0), 0)]

    def scale(self, seal: Iterable[int], ranges: Sequence[tuple[float, float]]) -> list[int]:
        active = self.epochs[-1]
        sealed = set(seal)
        kept = tuple(s for s in active.segments if s.id not in sealed)
        assert len(kept) == len(active.segments) - len(sealed), "sealing a segment that is not active"
        epoch = active.epoch + 1
        top = max(s.number for s in active.segments)
        created = tuple(
            SegmentRecord(top + 1 + i, epoch, epoch, start, end)
            for i, (start, end) in enumerate(sorted(ranges))
        )
        self.epochs.append(EpochRecord(epoch, epoch, kept + created, epoch))
        return [s.id for s in created]

    def window(self, low: int = 0, high: int | None = None) -> EpochWindow:
        last = self.epochs[-1].epoch if high is None else high
        return EpochWindow.of(self.epochs[low : last + 1])


def ids(segments: Iterable[SegmentRecord]) -> set[int]:
    return {s.id for s in segments}


# --- the window ------------------------------------------------------------------------------------


def _split_history() -> History:
    history = History(2)
    history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    return history


def test_window_looks_segments_up_in_their_creation_epoch() -> None:
    history = _split_history()
    history.scale([0], [(0.0, 0.5)])
    full, later = history.window(), history.window(1, 2)
    assert (full.low, full.high, later.low, later.high) == (0, 2, 1, 2)
    assert full.find(0) == history.epochs[0].segments[0]
    assert later.find(0) is None, "segment 0 was created in epoch 0, outside the window"
    assert later.find(seg(2, 1)) is not None
    assert full.find(seg(7, 1)) is None
    assert full.find(seg(2, 9)) is None
    assert later.holds(1, 0) and not later.holds(2, 0) and not later.holds(5, 0)
    assert later.record(2).epoch == 2
    with pytest.raises(InvalidInput):
        later.record(0)


def test_window_refuses_gaps_disorder_and_emptiness() -> None:
    epochs = _split_history().epochs
    with pytest.raises(InvalidInput):
        EpochWindow(())
    with pytest.raises(InvalidInput):
        EpochWindow((epochs[1], epochs[0]))
    history = _split_history()
    history.scale([0], [(0.0, 0.5)])
    with pytest.raises(InvalidInput):
        EpochWindow((history.epochs[0], history.epochs[2]))


def test_epoch_ranges_to_fetch() -> None:
    assert cut_epoch_range({seg(4, 2): 0, 1: 0}) == (0, 2)
    assert cut_epoch_range({seg(5, 3): 0, seg(6, 3): 0}) == (3, 3)
    with pytest.raises(InvalidInput):
        cut_epoch_range({})
    assert between_epoch_range({}, {seg(5, 3): 0}, 3) == (0, 3)
    assert between_epoch_range({seg(5, 3): 0}, {}, 7) == (3, 7)
    assert between_epoch_range({0: 0, seg(2, 1): 0}, {seg(4, 2): 0, seg(2, 1): 0}, 9) == (0, 2)
    never = TruncationRecord()
    assert truncation_epoch_range(never, {seg(2, 1): 0, seg(3, 1): 0}) == (0, 1)
    previous = TruncationRecord(stream_cut={0: 1, seg(2, 1): 1}, span={0: 2, seg(2, 1): 2})
    assert truncation_epoch_range(previous, {seg(2, 1): 1, seg(8, 4): 1}) == (0, 4)


# --- successors ------------------------------------------------------------------------------------


def _predecessor_history() -> History:
    history = History(5)  # 0..4 over [0, 1) in fifths
    five = history.epochs[0].segments
    history.scale([3, 4], [(five[3].key_start, five[4].key_end)])
    history.scale(
        [1, 2, seg(5, 1)], [(five[1].key_start, 0.3), (0.3, five[1].key_end), (five[2].key_start, 1.0)]
    )
    return history


def _following(history: History, segment: int, sealed_in: int) -> dict[int, list[int]]:
    pairs = successors_with_predecessors(segment, history.epochs[sealed_in], history.epochs[sealed_in - 1])
    return {s.id: predecessors for s, predecessors in pairs}


def test_successors_of_a_split() -> None:
    history = _split_history()
    pairs = successors_with_predecessors(1, history.epochs[1], history.epochs[0])
    assert [(s.id, p) for s, p in pairs] == [(seg(2, 1), [1]), (seg(3, 1), [1])]


def test_successors_of_merges() -> None:
    history = _predecessor_history()
    assert _following(history, 3, 1) == {seg(5, 1): [3, 4]}
    assert _following(history, 4, 1) == {seg(5, 1): [3, 4]}
    assert _following(history, seg(5, 1), 2) == {seg(8, 2): [2, seg(5, 1)]}
    assert _following(history, 2, 2) == {seg(8, 2): [2, seg(5, 1)]}
    assert _following(history, 1, 2) == {seg(6, 2): [1], seg(7, 2): [1]}


def test_successors_are_sorted_by_key_start() -> None:
    history = _predecessor_history()
    pairs = successors_with_predecessors(1, history.epochs[2], history.epochs[1])
    starts = [s.key_start for s, _ in pairs]
    assert starts == sorted(starts) and len(starts) == 2


def test_successors_need_adjacent_epochs_holding_the_segment() -> None:
    history = _predecessor_history()
    with pytest.raises(InvalidInput):
        successors_with_predecessors(1, history.epochs[2], history.epochs[0])
    with pytest.raises(InvalidInput):
        successors_with_predecessors(3, history.epochs[2], history.epochs[1])


# --- validity --------------------------------------------------------------------------------------


def _split_then_more() -> History:
    history = _split_history()
    history.scale([0], [(0.0, 0.25), (0.25, 0.5)])
    return history


@pytest.mark.parametrize(
    ("cut", "valid"),
    [
        ({0: 0}, False),
        ({0: 0, 1: 0, seg(2, 1): 0, seg(3, 1): 0}, False),
        ({0: 0, 1: 0}, True),
        ({0: 0, seg(2, 1): 0, seg(3, 1): 0}, True),
        ({0: 5, seg(2, 1): -1, seg(3, 1): -1}, True),
        ({0: 5, seg(2, 1): 7, seg(3, 1): -1}, True),
        ({0: 5, 1: -1}, True),
        ({0: -1, 1: -1}, False),
        ({0: 0, 1: -1, seg(2, 1): 0, seg(3, 1): 0}, False),
        ({0: 0, seg(7, 1): 0}, False),
        ({0: 0, seg(2, 9): 0}, False),
    ],
)
def test_validity_examples(cut: dict[int, int], valid: bool) -> None:
    history = _split_then_more()
    assert is_stream_cut_valid(cut, history.window(0, 1)) is valid
    assert is_stream_cut_valid(cut, history.window()) is valid, "a wider window must not change the answer"


def test_empty_cut_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        is_stream_cut_valid({}, _split_history().window())


def test_every_gap_needs_a_future_segment() -> None:
    # Java keeps only the last gap's verdict; here an uncovered first gap stays fatal.
    history = History(3)
    third = history.epochs[0].segments[2]
    history.scale([2], [(third.key_start, 0.8), (0.8, third.key_end)])
    window = history.window()
    assert not is_stream_cut_valid({1: 0, seg(3, 1): -1, seg(4, 1): -1}, window)
    assert is_stream_cut_valid({0: 0, 1: 0, seg(3, 1): -1, seg(4, 1): -1}, window)


def test_history_walk_rejects_reading_before_and_after_one_point() -> None:
    history = History(2)
    (merged,) = history.scale([0, 1], [(0.0, 1.0)])
    low, high = history.scale([merged], [(0.0, 0.5), (0.5, 1.0)])
    window = history.window()
    assert is_stream_cut_valid({0: 5, merged: -1}, window)
    assert is_stream_cut_valid({low: 5, high: -1}, window)
    # Reading 0 means the merged segment has not started, so its successor cannot be next.
    assert not is_stream_cut_valid({0: 5, high: -1}, window)


def test_history_walk_passes_fully_read_segments() -> None:
    history = History(2)
    two, three = history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    four, five = history.scale([three], [(0.75, 0.875), (0.875, 1.0)])
    assert is_stream_cut_valid({0: 3, two: 4, four: -1, five: -1}, history.window())
    # 1 and 2 are behind the reader; 2 merged with 0, which is still being read, so the merge waits.
    history = History(2)
    two, three = history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    (merged,) = history.scale([0, two], [(0.0, 0.75)])
    assert is_stream_cut_valid({0: 3, three: -1, merged: -1}, history.window())
    assert not is_stream_cut_valid({0: 3, three: -1, merged: 0}, history.window())


def test_validity_does_not_depend_on_fetched_history() -> None:
    # The walk stays inside the cut's own epochs, as Java's fetch does; a later merge of 2 into 0's
    # successor must not change the verdict just because the caller fetched more epochs.
    history = History(2)
    two, three = history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    history.scale([0, two], [(0.0, 0.75)])
    cut = {0: 0, three: -1}
    assert is_stream_cut_valid(cut, history.window(0, 1))
    assert is_stream_cut_valid(cut, history.window())


def test_key_space_ending_below_one_is_still_covered() -> None:
    history = History(49)
    last = history.epochs[0].segments[-1]
    assert last.key_end == 0.9999999999999999
    window = history.window()
    assert is_stream_cut_valid({s.id: 0 for s in history.epochs[0].segments}, window)
    assert not is_stream_cut_valid({s.id: 0 for s in history.epochs[0].segments[:-1]}, window)


# --- span and ordering -----------------------------------------------------------------------------


def _truncation_history() -> History:
    history = History(2)
    history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    history.scale([seg(3, 1)], [(0.75, (0.75 + 1.0) / 2), ((0.75 + 1.0) / 2, 1.0)])
    history.scale([seg(2, 1)], [(0.5, (0.75 + 0.5) / 2), ((0.75 + 0.5) / 2, 0.75)])
    history.scale([0], [(0.0, (0.0 + 0.5) / 2), ((0.0 + 0.5) / 2, 0.5)])
    return history


CUT1 = {0: 1, 1: 1}
CUT2 = {0: 1, seg(2, 1): 1, seg(4, 2): 1, seg(5, 2): 1}
CUT3 = {seg(2, 1): 10, seg(4, 2): 10, seg(5, 2): 10, seg(8, 4): 10, seg(9, 4): 10}


def test_span_is_the_latest_epoch_within_the_cut_range() -> None:
    window = _truncation_history().window()
    assert span_ids(stream_cut_span(CUT1, window)) == {0: 0, 1: 0}
    assert span_ids(stream_cut_span(CUT2, window)) == {0: 2, seg(2, 1): 2, seg(4, 2): 2, seg(5, 2): 2}
    assert span_ids(stream_cut_span(CUT3, window)) == {
        seg(2, 1): 2,
        seg(4, 2): 4,
        seg(5, 2): 4,
        seg(8, 4): 4,
        seg(9, 4): 4,
    }


def test_span_of_unknown_segment_is_invalid_input() -> None:
    window = _truncation_history().window()
    with pytest.raises(InvalidInput):
        stream_cut_span({0: 1, seg(3, 2): 1}, window)
    with pytest.raises(InvalidInput):
        stream_cut_span({}, window)


def test_stored_span_round_trips() -> None:
    window = _truncation_history().window()
    span = stream_cut_span(CUT3, window)
    assert resolve_span(span_ids(span), window) == span
    with pytest.raises(InvalidInput):
        resolve_span({seg(3, 2): 2}, window)


@pytest.mark.parametrize(
    ("cut", "order"),
    [
        ({0: 0, 1: 10}, CutOrder.BEFORE),
        ({0: 10, 1: 10}, CutOrder.EQUAL_OR_AFTER),
        ({0: 1, 1: 11}, CutOrder.OVERLAPS),
        ({0: 20, 1: 20}, CutOrder.EQUAL_OR_AFTER),
    ],
)
def test_compare_against_ten_ten(cut: dict[int, int], order: CutOrder) -> None:
    window = History(2).window()
    reference = {0: 10, 1: 10}
    assert (
        compare_stream_cuts(cut, stream_cut_span(cut, window), reference, stream_cut_span(reference, window))
        == order
    )


def test_compare_across_epochs_uses_ids() -> None:
    window = _truncation_history().window()
    span1, span2, span3 = (stream_cut_span(c, window) for c in (CUT1, CUT2, CUT3))
    assert compare_stream_cuts(CUT1, span1, CUT2, span2) is CutOrder.BEFORE
    assert compare_stream_cuts(CUT3, span3, CUT2, span2) is CutOrder.EQUAL_OR_AFTER
    mixed = {0: 50, seg(2, 1): 0, seg(4, 2): 0, seg(5, 2): 0}
    assert compare_stream_cuts(mixed, stream_cut_span(mixed, window), CUT2, span2) is CutOrder.OVERLAPS


def test_equal_or_after() -> None:
    window = _truncation_history().window()
    span1, span2, span3 = (stream_cut_span(c, window) for c in (CUT1, CUT2, CUT3))
    assert cut_equal_or_after(CUT2, span2, CUT1, span1)
    assert cut_equal_or_after(CUT3, span3, CUT2, span2)
    assert cut_equal_or_after(CUT3, span3, CUT3, span3)
    assert not cut_equal_or_after(CUT1, span1, CUT2, span2)
    assert not cut_equal_or_after(CUT2, span2, CUT3, span3)
    assert cut_equal_or_after(CUT1, span1, {}, {})


# --- segments between ------------------------------------------------------------------------------

S2, S3, S4, S5, S6 = seg(2, 1), seg(3, 1), seg(4, 2), seg(5, 3), seg(6, 3)
C01 = {0: 0, 1: 0}
C023 = {0: 0, S2: 0, S3: 0}
C423 = {S4: 0, S2: 0, S3: 0}
C56 = {S5: 0, S6: 0}
C41 = {S4: 0, 1: 0}
C06 = {0: 0, S6: 0}
EMPTY: dict[int, int] = {}


def _service_history() -> History:
    history = History(2)
    history.scale([1], [(0.5, 0.75), (0.75, 1.0)])
    history.scale([0], [(0.0, 0.5)])
    history.scale([S2, S3, S4], [(0.0, 0.5), (0.5, 1.0)])
    return history


@pytest.mark.parametrize(
    ("from_cut", "to_cut", "expected"),
    [
        (EMPTY, C01, {0, 1}),
        (EMPTY, C023, {0, 1, S2, S3}),
        (EMPTY, C423, {0, 1, S2, S3, S4}),
        (EMPTY, C56, {0, 1, S2, S3, S4, S5, S6}),
        (EMPTY, C41, {0, 1, S4}),
        (EMPTY, C06, {0, 1, S2, S3, S6}),
        (C01, EMPTY, {0, 1, S2, S3, S4, S5, S6}),
        (C023, EMPTY, {0, S2, S3, S4, S5, S6}),
        (C423, EMPTY, {S2, S3, S4, S5, S6}),
        (C56, EMPTY, {S5, S6}),
        (C41, EMPTY, {1, S2, S3, S4, S5, S6}),
        (C06, EMPTY, {0, S4, S5, S6}),
        (C01, C023, {0, 1, S2, S3}),
        (C01, C423, {0, 1, S2, S3, S4}),
        (C01, C06, {0, 1, S2, S3, S6}),
        (C41, C56, {1, S2, S3, S4, S5, S6}),
    ],
)
def test_segments_between(from_cut: dict[int, int], to_cut: dict[int, int], expected: set[int]) -> None:
    history = _service_history()
    assert ids(segments_between_cuts(from_cut, to_cut, history.window())) == expected
    narrow = history.window(*between_epoch_range(from_cut, to_cut, active_epoch=3))
    assert ids(segments_between_cuts(from_cut, to_cut, narrow)) == expected


@pytest.mark.parametrize(("from_cut", "to_cut"), [(C023, C01), (C56, C023), (EMPTY, EMPTY)])
def test_segments_between_rejects(from_cut: dict[int, int], to_cut: dict[int, int]) -> None:
    with pytest.raises(InvalidInput):
        segments_between_cuts(from_cut, to_cut, _service_history().window())


def test_segments_between_whole_epochs() -> None:
    history = _service_history()
    window = history.window()
    assert len(segments_between(None, None, window)) == 7
    assert ids(segments_between(epoch_span(history.epochs[2]), None, window)) == {S2, S3, S4, S5, S6}


def _three_way_history() -> tuple[History, list[int]]:
    history = History(3)
    zero, one, two = history.epochs[0].segments
    ranges = [
        (0.0, 0.16),
        (0.16, zero.key_end),
        (one.key_start, 0.5),
        (0.5, one.key_end),
        (two.key_start, 0.83),
        (0.83, two.key_end),
    ]
    made = history.scale([0, 1, 2], ranges)
    made += history.scale(made, [(0.0, 0.5), (0.5, 1.0)])
    return history, [0, 1, 2, *made]


def test_segments_between_after_full_rescales() -> None:
    history, n = _three_way_history()
    window = history.window()

    def between(from_numbers: Iterable[int], to_numbers: Iterable[int]) -> set[int]:
        found = segments_between_cuts({n[i]: 0 for i in from_numbers}, {n[i]: 0 for i in to_numbers}, window)
        return {s.number for s in found}

    assert between([0, 1, 2], []) == set(range(11))
    assert between([0, 2, 5, 6], []) == set(range(11)) - {1}
    assert between([0, 5, 10], []) == {0, 3, 4, 5, 9, 10}
    assert between([6, 7, 8, 9], []) == {6, 7, 8, 9, 10}
    assert between([10, 9], []) == {9, 10}
    assert between([0, 1, 2], [0, 5, 6, 2]) == {0, 1, 2, 5, 6}
    assert between([0, 5, 6, 2], [9, 10]) == set(range(11)) - {1}
    assert between([], [0, 5, 6, 2]) == {0, 1, 2, 5, 6}
    for bad_from, bad_to in [
        ([3, 4, 1, 2], [0, 1, 2]),
        ([3, 4, 1, 2], [0, 5, 6, 2]),
        ([0, 5, 6, 2], [8, 7, 1, 3, 4]),
    ]:
        with pytest.raises(InvalidInput):
            between(bad_from, bad_to)


# --- size between cuts -----------------------------------------------------------------------------


def test_size_till_cut_on_epoch_zero() -> None:
    history = History(2)
    cut = {0: 9, 1: 10}
    assert size_between({}, cut, segments_between_cuts({}, cut, history.window()), {}) == 19


def test_size_till_cut_after_sealing() -> None:
    history = History(2)
    two, three = history.scale([0, 1], [(0.0, 0.5), (0.5, 1.0)])
    cut = {two: 29, three: 30}
    segments = segments_between_cuts({}, cut, history.window())
    assert ids(segments) == {0, 1, two, three}
    assert size_between({}, cut, segments, {0: 70, 1: 70}) == 199


def test_size_between_cases() -> None:
    history = _split_history()
    segments = history.window().epochs[0].segments + history.window().epochs[1].segments[1:]
    # 0 in both: 8-5; 1 only in from: 40-0 (negative offset); 2 only in to, future: 0;
    # 3 in neither, size unknown: 0
    assert size_between({0: 5, 1: -1}, {0: 8, seg(2, 1): -1}, segments, {1: 40}) == 43
    assert size_between({0: 5}, {0: 5}, segments[:1], {}) == 0
    assert size_between({}, {}, segments, {0: 7, 1: 3, seg(2, 1): -1, seg(3, 1): 11}) == 21


# --- truncation ------------------------------------------------------------------------------------

SEALED = {0: 100, 1: 100, seg(2, 1): 100, seg(3, 1): 100}


def _truncate(history: History, previous: TruncationRecord, cut: dict[int, int]) -> TruncationRecord:
    """What startTruncation does with these functions: fetch, validate, order, compute."""
    window = history.window(*truncation_epoch_range(previous, cut))
    if not is_stream_cut_valid(cut, window):
        raise InvalidInput("invalid stream cut")
    span = stream_cut_span(cut, window)
    if not cut_equal_or_after(cut, span, previous.stream_cut, resolve_span(previous.span, window)):
        raise InvalidInput("behind the previous truncation")
    return next_truncation(previous, cut, span, window, SEALED)


def test_truncation_sequence() -> None:
    history = _truncation_history()
    first = _truncate(history, TruncationRecord(), CUT1)
    assert first == TruncationRecord(
        stream_cut=CUT1,
        span={0: 0, 1: 0},
        deleted_segments=frozenset(),
        to_delete=frozenset(),
        size_till=2,
        updating=True,
    )

    second = _truncate(history, completed_truncation(first), CUT2)
    assert second.to_delete == {1, seg(3, 1)}
    assert second.span == {0: 2, seg(2, 1): 2, seg(4, 2): 2, seg(5, 2): 2}
    assert second.stream_cut == CUT2 and second.updating
    # 0: 1-1, 1: 100-1, 2: 1, 3: 100, 4: 1, 5: 1
    assert second.size_till == 2 + 202

    third = _truncate(history, completed_truncation(second), CUT3)
    assert third.to_delete == {0}
    assert third.deleted_segments == {1, seg(3, 1)}
    assert third.span == {seg(2, 1): 2, seg(4, 2): 4, seg(5, 2): 4, seg(8, 4): 4, seg(9, 4): 4}
    # 0: 100-1, 2/4/5: 10-1 each, 8/9: 10 each
    assert third.size_till == 204 + 146

    done = completed_truncation(third)
    again = _truncate(history, done, CUT3)
    assert again.to_delete == frozenset() and again.size_till == done.size_till
    assert again.deleted_segments == {0, 1, seg(3, 1)}

    lower_offsets = dict.fromkeys(CUT3, 1)
    with pytest.raises(InvalidInput, match="behind"):
        _truncate(history, done, lower_offsets)
    predecessor_again = {seg(2, 1): 10, seg(4, 2): 10, seg(5, 2): 10, 0: 10}
    assert is_stream_cut_valid(predecessor_again, history.window())
    with pytest.raises(InvalidInput, match="behind"):
        _truncate(history, done, predecessor_again)


def test_truncation_excludes_already_deleted_segments() -> None:
    history = _truncation_history()
    previous = dataclasses.replace(
        completed_truncation(_truncate(history, TruncationRecord(), CUT1)), deleted_segments=frozenset({1})
    )
    record = _truncate(history, previous, CUT2)
    assert record.to_delete == {seg(3, 1)}
    assert record.deleted_segments == {1}


def test_truncation_refuses_while_one_is_in_progress() -> None:
    history = _truncation_history()
    in_progress = _truncate(history, TruncationRecord(), CUT1)
    window = history.window()
    with pytest.raises(IllegalState):
        next_truncation(in_progress, CUT2, stream_cut_span(CUT2, window), window, SEALED)
