"""Retention rules checked against worked examples of Pravega's retention and the
Java tests they come from (StreamMetadataTasksTest): recording, the truncation-point choice for
TIME and SIZE with and without subscribers, purge selection and the subscribers' lower bound."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from app.domain.errors import InvalidInput
from app.domain.ids import segment_id
from app.domain.records import EpochRecord, RetentionPolicy, RetentionType, SegmentRecord
from app.domain.retention import (
    CutOrdering,
    StreamCutRecord,
    bound_cuts,
    choose_truncation_cut,
    epochs_named,
    is_newer,
    newest_at_or_before,
    purge_up_to,
    purged,
    retained_function,
    should_record,
    subscribers_lower_bound,
)
from app.domain.scaling import initial_segments
from app.domain.streamcuts import EpochWindow

MINUTE = 60_000
LONG_MAX = 2**63 - 1


def seg(number: int, epoch: int) -> int:
    return segment_id(number, epoch)


class History:
    """Epochs built as a scale builds them: new numbers follow the active maximum, assigned
    in ascending key-start order."""

    def __init__(self, count: int) -> None:
        self.epochs = [EpochRecord(0, 0, initial_segments(count, 0, 0), 0)]

    def scale(self, seal: Iterable[int], ranges: Sequence[tuple[float, float]]) -> list[int]:
        active = self.epochs[-1]
        sealed = set(seal)
        kept = tuple(s for s in active.segments if s.id not in sealed)
        assert len(kept) == len(active.segments) - len(sealed)
        epoch = active.epoch + 1
        top = max(s.number for s in active.segments)
        created = tuple(
            SegmentRecord(top + 1 + i, epoch, epoch, start, end)
            for i, (start, end) in enumerate(sorted(ranges))
        )
        self.epochs.append(EpochRecord(epoch, epoch, kept + created, epoch))
        return [s.id for s in created]

    def window(self) -> EpochWindow:
        return EpochWindow.of(self.epochs)


def two_segments() -> CutOrdering:
    return CutOrdering(History(2).window())


def rec(time: int, size: int, cut: dict[int, int]) -> StreamCutRecord:
    return StreamCutRecord(time, size, cut)


def size_policy(low: int, high: int) -> RetentionPolicy:
    return RetentionPolicy(RetentionType.SIZE, low, high)


def time_policy(low: int, high: int) -> RetentionPolicy:
    return RetentionPolicy(RetentionType.TIME, low, high)


# --- recording -----------------------------------------------------------------------------------


def test_a_tail_cut_is_recorded_for_an_empty_set() -> None:
    assert should_record(None, 0, 30 * MINUTE)


def test_a_tail_cut_is_recorded_only_once_the_latest_is_strictly_older_than_the_frequency() -> None:
    latest = rec(1_000, 0, {0: 0})
    assert not should_record(latest, 1_000 + 5 * MINUTE, 30 * MINUTE)
    assert not should_record(latest, 1_000 + 30 * MINUTE, 30 * MINUTE)
    assert should_record(latest, 1_000 + 30 * MINUTE + 1, 30 * MINUTE)


def test_records_are_appended_only_if_newer_than_the_latest() -> None:
    latest = rec(100, 0, {})
    assert is_newer(rec(101, 0, {}), latest)
    assert not is_newer(rec(100, 0, {}), latest)
    assert not is_newer(rec(99, 0, {}), latest)
    assert is_newer(rec(0, 0, {}), None)


# --- sizes ---------------------------------------------------------------------------------------


def test_size_till_a_cut_from_the_head_and_incrementally() -> None:
    ordering = two_segments()
    first = rec(1, ordering.size_till({0: 9, 1: 10}, {}), {0: 9, 1: 10})
    assert first.recording_size == 19
    assert ordering.size_till({0: 50, 1: 50}, {}) == 100
    # Counted on from the previous record: the same figure without walking from the head.
    assert ordering.size_till({0: 50, 1: 50}, {}, reference=first) == 100


def test_size_till_spans_sealed_segments_after_a_split() -> None:
    history = History(2)
    two, three = history.scale([0, 1], [(0.0, 0.5), (0.5, 1.0)])
    ordering = CutOrdering(history.window())
    sealed = {0: 70, 1: 70}
    assert ordering.size_till({two: 29, three: 30}, sealed) == 199
    # From a recorded cut in epoch 0, the rest of the sealed segments counts once.
    reference = rec(1, 19, {0: 9, 1: 10})
    assert ordering.size_till({two: 29, three: 30}, sealed, reference=reference) == 199


# --- bound cuts ----------------------------------------------------------------------------------


def test_bound_cuts_pick_the_newest_above_min_and_the_oldest_within_max() -> None:
    records = [rec(t, 0, {0: t}) for t in (10, 20, 30, 40, 50)]
    policy = time_policy(15, 35)
    bounds = bound_cuts(policy, records, retained_function(policy, records, 60))
    # ages 50, 40, 30, 20, 10: min = smallest age >= 15 (20), max = largest age in [15, 35] (30).
    assert bounds.min_cut == records[3]
    assert bounds.max_cut == records[2]


def test_max_falls_back_to_min_when_no_record_is_within_max() -> None:
    records = [rec(10, 0, {0: 1}), rec(20, 0, {0: 2})]
    policy = time_policy(5, 6)
    bounds = bound_cuts(policy, records, retained_function(policy, records, 40))
    assert bounds.min_cut == records[1]
    assert bounds.max_cut == records[1]


def test_no_bound_cuts_when_nothing_retains_min() -> None:
    records = [rec(10, 0, {0: 1})]
    policy = time_policy(100, LONG_MAX)
    assert bound_cuts(policy, records, retained_function(policy, records, 20)).min_cut is None


def test_equal_retained_values_choose_the_oldest_record() -> None:
    records = [rec(1, 4, {0: 2, 1: 2}), rec(20, 4, {0: 2, 1: 2}), rec(30, 20, {0: 10, 1: 10})]
    policy = size_policy(2, 10)
    bounds = bound_cuts(policy, records, retained_function(policy, records, 0))
    assert bounds.min_cut is records[0]


# --- without subscribers ---------------------------------------------------------------------------


def test_size_based_retention_example() -> None:
    """sizeBasedRetentionStreamTest: SIZE min 100, max unset (0)."""
    ordering = two_segments()
    policy = size_policy(100, 0)
    cut1 = rec(0, 19, {0: 9, 1: 10})
    cut2 = rec(30 * MINUTE + 1, 100, {0: 50, 1: 50})
    cut3 = rec(60 * MINUTE + 2, 120, {0: 60, 1: 60})
    assert choose_truncation_cut(policy, [cut1], cut1.recording_time, ordering) is None
    # retained(cut1) = 81 < 100
    assert choose_truncation_cut(policy, [cut1, cut2], cut2.recording_time, ordering) is None
    records = [cut1, cut2, cut3]
    chosen = choose_truncation_cut(policy, records, cut3.recording_time, ordering)
    assert chosen == {0: 9, 1: 10}
    up_to = purge_up_to(chosen, records, ordering)
    assert up_to == cut1
    assert purged(records, up_to) == [cut1]


def test_time_based_retention_example() -> None:
    """timeBasedRetentionStreamTest: TIME min 60 min, frequency 30 min."""
    ordering = two_segments()
    policy = time_policy(60 * MINUTE, 0)
    frequency = 30 * MINUTE
    t = 1_000_000
    cut1 = rec(t, 0, {0: 1, 1: 1})
    assert not should_record(cut1, t + 5 * MINUTE, frequency)
    assert should_record(cut1, t + 30 * MINUTE + 1, frequency)
    cut3 = rec(t + 30 * MINUTE + 1, 0, {0: 20, 1: 20})
    assert choose_truncation_cut(policy, [cut1, cut3], cut3.recording_time, ordering) is None
    now = t + 60 * MINUTE + 2
    assert should_record(cut3, now, frequency)
    cut4 = rec(now, 0, {0: 20, 1: 20})
    records = [cut1, cut3, cut4]
    chosen = choose_truncation_cut(policy, records, now, ordering)
    assert chosen == {0: 1, 1: 1}
    up_to = purge_up_to(chosen, records, ordering)
    assert up_to is not None
    assert [r for r in records if r not in purged(records, up_to)] == [cut3, cut4]


def test_without_subscribers_max_has_no_effect() -> None:
    ordering = two_segments()
    records = [rec(0, 0, {0: 1, 1: 1}), rec(10, 0, {0: 2, 1: 2}), rec(20, 0, {0: 3, 1: 3})]
    # Ages 30, 20, 10; max 15 would favour nothing older than 15, yet min (5) alone decides.
    assert choose_truncation_cut(time_policy(5, 15), records, 30, ordering) == {0: 3, 1: 3}
    assert choose_truncation_cut(time_policy(5, 15), records, 30, ordering, lower_bound={}) == {0: 3, 1: 3}


def test_no_subscriber_min_zero_truncates_at_the_new_tail() -> None:
    """consumptionBasedRetentionWithNoSubscriber: TIME min 0 truncates at the cut just taken."""
    history = History(2)
    two, three = history.scale([0, 1], [(0.0, 0.6), (0.6, 1.0)])
    four, five = history.scale([three], [(0.6, 0.8), (0.8, 1.0)])
    (six,) = history.scale([four, five], [(0.6, 1.0)])
    seven, eight, nine = history.scale([two, six], [(0.0, 0.3), (0.3, 0.6), (0.6, 1.0)])
    (ten,) = history.scale([seven, eight, nine], [(0.0, 1.0)])
    ordering = CutOrdering(history.window())
    records = [rec(1, 0, {ten: 2})]
    assert choose_truncation_cut(time_policy(0, LONG_MAX), records, 1, ordering) == {ten: 2}


def test_no_records_no_truncation() -> None:
    assert choose_truncation_cut(size_policy(0, 0), [], 0, two_segments()) is None


# --- SIZE with subscribers -----------------------------------------------------------------------


def test_consumption_based_size_limit_example() -> None:
    """consumptionBasedRetentionSizeLimitTest: SIZE min 2, max 10, two subscribers."""
    ordering = two_segments()
    policy = size_policy(2, 10)

    def choose(records: list[StreamCutRecord], cuts: list[dict[int, int]]) -> dict[int, int] | None:
        bound = subscribers_lower_bound(cuts, ordering.window)
        return choose_truncation_cut(
            policy, records, records[-1].recording_time, ordering, bound, ordering.size_till(bound, {})
        )

    def purge(records: list[StreamCutRecord], chosen: dict[int, int]) -> list[StreamCutRecord]:
        up_to = purge_up_to(chosen, records, ordering)
        return records if up_to is None else [r for r in records if r not in purged(records, up_to)]

    # 1. tail {0:2,1:2}, lower bound {0:1,1:1} retains 2 (within [min, max)): truncate at it.
    records = [rec(1, 4, {0: 2, 1: 2})]
    chosen = choose(records, [{0: 2, 1: 1}, {0: 1, 1: 2}])
    assert chosen == {0: 1, 1: 1}
    records = purge(records, chosen)
    assert len(records) == 1  # nothing recorded is at or before {0:1,1:1}

    # 2. tail {0:2,1:2} again, both at {0:2,1:2}: the bound retains 0 < min, no cut retains min.
    records.append(rec(20, 4, {0: 2, 1: 2}))
    assert choose(records, [{0: 2, 1: 2}, {0: 2, 1: 2}]) is None

    # 3. tail {0:10,1:10}, bound {0:10,1:9} retains 1 < min; min {0:2,1:2} is Before it.
    records.append(rec(30, 20, {0: 10, 1: 10}))
    chosen = choose(records, [{0: 10, 1: 9}, {0: 10, 1: 9}])
    assert chosen == {0: 2, 1: 2}
    records = purge(records, chosen)
    assert [r.recording_time for r in records] == [30]

    # 4. tail {0:20,1:20}: the bound retains 21 >= max; max (= min) {0:10,1:10} retains 20 < 21.
    records.append(rec(40, 40, {0: 20, 1: 20}))
    chosen = choose(records, [{0: 10, 1: 9}, {0: 10, 1: 9}])
    assert chosen == {0: 10, 1: 10}
    records = purge(records, chosen)
    assert [r.recording_time for r in records] == [40]

    # 5. tail {0:30,1:30}, bound {0:21,1:19} retains 20 >= max; max {0:20,1:20} retains 20 too,
    # not less: the lower bound is used.
    records.append(rec(50, 60, {0: 30, 1: 30}))
    assert choose(records, [{0: 21, 1: 19}, {0: 21, 1: 19}]) == {0: 21, 1: 19}


def test_size_lower_bound_overlapping_min_truncates_at_the_newest_cut_before_it() -> None:
    """consumptionBasedRetentionSizeLimitWithOverlappingMinTest: SIZE min 2, max 20."""
    ordering = two_segments()
    records = [
        rec(10, 5, {0: 0, 1: 5}),
        rec(20, 6, {0: 0, 1: 6}),
        rec(30, 17, {0: 10, 1: 7}),
        rec(40, 18, {0: 10, 1: 8}),
        rec(50, 20, {0: 10, 1: 10}),
    ]
    bound = {0: 9, 1: 10}
    assert ordering.size_till(bound, {}) == 19
    chosen = choose_truncation_cut(size_policy(2, 20), records, 50, ordering, bound, 19)
    assert chosen == {0: 0, 1: 6}


def test_size_lower_bound_below_min_without_a_min_cut_does_nothing() -> None:
    ordering = two_segments()
    records = [rec(1, 4, {0: 2, 1: 2})]
    assert choose_truncation_cut(size_policy(5, 100), records, 1, ordering, {0: 1, 1: 1}, 2) is None


def test_size_lower_bound_below_min_with_no_record_before_it_does_nothing() -> None:
    ordering = two_segments()
    records = [rec(1, 10, {0: 5, 1: 5}), rec(2, 20, {0: 10, 1: 10})]
    # The bound {0:1,1:17} retains 2 < min; min {0:5,1:5} (retains 10) overlaps it, and no
    # record is at or before it.
    assert ordering.size_till({0: 1, 1: 17}, {}) == 18
    assert choose_truncation_cut(size_policy(3, 100), records, 2, ordering, {0: 1, 1: 17}, 18) is None


def test_size_with_subscribers_needs_the_lower_bound_size() -> None:
    with pytest.raises(InvalidInput):
        choose_truncation_cut(size_policy(1, 2), [rec(1, 4, {0: 2, 1: 2})], 1, two_segments(), {0: 1, 1: 1})


# --- TIME with subscribers -----------------------------------------------------------------------


def test_consumption_based_time_limit_example() -> None:
    """consumptionBasedRetentionTimeLimitTest: TIME min 1 ms, max 10 ms, two subscribers."""
    ordering = two_segments()
    policy = time_policy(1, 10)

    def choose(records: list[StreamCutRecord], now: int, bound: dict[int, int]) -> dict[int, int] | None:
        return choose_truncation_cut(policy, records, now, ordering, bound)

    def purge(records: list[StreamCutRecord], chosen: dict[int, int]) -> list[StreamCutRecord]:
        up_to = purge_up_to(chosen, records, ordering)
        return records if up_to is None else [r for r in records if r not in purged(records, up_to)]

    # 1. one record at time 0, now 0: nothing is old enough for min.
    records = [rec(0, 4, {0: 2, 1: 2})]
    assert choose(records, 0, subscribers_lower_bound([{0: 2, 1: 1}, {0: 1, 1: 2}], ordering.window)) is None

    # 2. min {0:10,1:10} (age 1) is after the bound {0:3,1:3}; the max bound (age >= 10) is
    # {0:2,1:2} at time 0, which the lower bound is after: truncate at the lower bound.
    records += [rec(2, 4, {0: 2, 1: 2}), rec(10, 20, {0: 10, 1: 10}), rec(11, 20, {0: 10, 1: 10})]
    chosen = choose(records, 11, {0: 3, 1: 3})
    assert chosen == {0: 3, 1: 3}
    records = purge(records, chosen)
    assert [r.recording_time for r in records] == [10, 11]

    # 3. min {0:10,1:10} (age 9) is Before the bound {0:11,1:11}: truncate at min.
    records.append(rec(20, 22, {0: 11, 1: 11}))
    chosen = choose(records, 20, {0: 11, 1: 11})
    assert chosen == {0: 10, 1: 10}
    records = purge(records, chosen)
    assert [r.recording_time for r in records] == [20]

    # 4. min = max = {0:20,1:20} (age 10) is after the bound, which is Before the max bound: max.
    records += [rec(30, 40, {0: 20, 1: 20}), rec(40, 42, {0: 21, 1: 21})]
    chosen = choose(records, 40, {0: 11, 1: 11})
    assert chosen == {0: 20, 1: 20}
    records = purge(records, chosen)
    assert [r.recording_time for r in records] == [40]

    # 5. the bound {0:22,1:21} overlaps the max bound {0:21,1:22}: truncate at the max bound.
    records += [rec(50, 43, {0: 21, 1: 22}), rec(59, 60, {0: 30, 1: 30}), rec(60, 60, {0: 30, 1: 30})]
    assert choose(records, 60, {0: 22, 1: 21}) == {0: 21, 1: 22}


def test_time_lower_bound_overlapping_min() -> None:
    """consumptionBasedRetentionTimeLimitWithOverlappingMinTest: TIME min 10, max 50."""
    ordering = two_segments()
    policy = time_policy(10, 50)
    records = [rec(10, 5, {0: 1, 1: 5}), rec(20, 6, {0: 1, 1: 6})]
    # min {0:1,1:5} overlaps the bound {0:0,1:10} and no record is at or before it.
    assert choose_truncation_cut(policy, records, 20, ordering, {0: 0, 1: 10}) is None
    records += [rec(30, 17, {0: 10, 1: 7}), rec(40, 18, {0: 10, 1: 8}), rec(50, 20, {0: 10, 1: 10})]
    chosen = choose_truncation_cut(policy, records, 50, ordering, {0: 9, 1: 10})
    assert chosen == {0: 1, 1: 6}


def test_time_min_after_the_lower_bound_without_a_max_bound_uses_the_lower_bound() -> None:
    ordering = two_segments()
    records = [rec(10, 0, {0: 5, 1: 5}), rec(20, 0, {0: 9, 1: 9})]
    assert choose_truncation_cut(time_policy(5, LONG_MAX), records, 25, ordering, {0: 3, 1: 3}) == {
        0: 3,
        1: 3,
    }


def test_time_without_a_min_cut_does_nothing_even_with_subscribers() -> None:
    ordering = two_segments()
    records = [rec(10, 0, {0: 5, 1: 5})]
    assert choose_truncation_cut(time_policy(100, 200), records, 20, ordering, {0: 1, 1: 1}) is None


# --- purge ---------------------------------------------------------------------------------------


def test_purge_takes_the_newest_record_at_or_before_the_cut_and_everything_older() -> None:
    ordering = two_segments()
    records = [rec(1, 0, {0: 1, 1: 1}), rec(2, 0, {0: 2, 1: 2}), rec(3, 0, {0: 3, 1: 3})]
    up_to = purge_up_to({0: 2, 1: 2}, records, ordering)
    assert up_to == records[1]
    assert purged(records, up_to) == records[:2]
    # A cut behind every record purges nothing; one between records takes the older.
    assert purge_up_to({0: 0, 1: 0}, records, ordering) is None
    assert purge_up_to({0: 2, 1: 9}, records, ordering) == records[1]


def test_newest_at_or_before_across_epochs() -> None:
    history = History(2)
    two, three = history.scale([0], [(0.0, 0.25), (0.25, 0.5)])
    ordering = CutOrdering(history.window())
    records = [rec(1, 0, {0: 5, 1: 5}), rec(2, 0, {two: 1, three: 1, 1: 9})]
    assert newest_at_or_before({two: 0, three: 0, 1: 9}, records, ordering) == records[0]
    assert newest_at_or_before({two: 4, three: 4, 1: 12}, records, ordering) == records[1]


# --- subscribers' lower bound --------------------------------------------------------------------


def test_lower_bound_takes_the_minimum_per_segment() -> None:
    window = History(2).window()
    assert subscribers_lower_bound([{0: 2, 1: 1}, {0: 1, 1: 2}], window) == {0: 1, 1: 1}


def test_empty_cuts_contribute_nothing() -> None:
    window = History(2).window()
    assert subscribers_lower_bound([], window) == {}
    assert subscribers_lower_bound([{}, {0: 4, 1: 7}, {}], window) == {0: 4, 1: 7}


def _merge_history() -> tuple[History, dict[str, int]]:
    """| s0 | s3 | s6 over s4, s1, s2 merged into s5 (consumptionBasedRetentionWithScale)."""
    history = History(3)
    three, four = history.scale([0], [(0.0, 1 / 6), (1 / 6, 1 / 3)])
    (five,) = history.scale([1, 2, four], [(1 / 6, 1.0)])
    (six,) = history.scale([three, five], [(0.0, 1.0)])
    return history, {"three": three, "four": four, "five": five, "six": six}


def test_lower_bound_keeps_a_future_segment_its_predecessors_do_not_cover() -> None:
    history, s = _merge_history()
    bound = subscribers_lower_bound([{0: 1, s["five"]: -1}, {0: 1, 2: 1, s["five"]: -1}], history.window())
    assert bound == {0: 1, 2: 1, s["five"]: -1}


def test_lower_bound_drops_a_future_segment_once_predecessors_cover_it() -> None:
    history, s = _merge_history()
    cuts = [{0: 1, s["five"]: -1}, {0: 1, 2: 1, s["five"]: -1}, {0: 1, 1: 1, 2: 1}]
    assert subscribers_lower_bound(cuts, history.window()) == {0: 1, 1: 1, 2: 1}


def test_lower_bound_replaces_newer_segments_with_an_older_one() -> None:
    """consumptionBasedRetentionWithScale2."""
    history = History(2)
    two, three = history.scale([0, 1], [(0.0, 0.6), (0.6, 1.0)])
    four, five = history.scale([three], [(0.6, 0.8), (0.8, 1.0)])
    (six,) = history.scale([four, five], [(0.6, 1.0)])
    seven, eight, nine = history.scale([two, six], [(0.0, 0.3), (0.3, 0.6), (0.6, 1.0)])
    history.scale([seven, eight, nine], [(0.0, 1.0)])
    cuts = [{0: 1, two: -1, eight: -1, nine: 1}, {1: 1, two: -1}]
    assert subscribers_lower_bound(cuts, history.window()) == {0: 1, 1: 1}
    # The order of subscribers does not change the answer for valid cuts.
    assert subscribers_lower_bound(list(reversed(cuts)), history.window()) == {0: 1, 1: 1}


def test_lower_bound_drops_a_newer_read_position_behind_an_included_older_one() -> None:
    history = History(2)
    two, three = history.scale([0], [(0.0, 0.25), (0.25, 0.5)])
    bound = subscribers_lower_bound([{0: 7, 1: 3}, {two: 4, three: 5, 1: 1}], history.window())
    assert bound == {0: 7, 1: 1}


def test_lower_bound_rejects_an_unknown_segment() -> None:
    with pytest.raises(InvalidInput):
        subscribers_lower_bound([{seg(9, 0): 1}], History(2).window())


def test_epochs_named_by_cuts() -> None:
    assert epochs_named([]) is None
    assert epochs_named([{}, {}]) is None
    assert epochs_named([{seg(3, 2): 0}, {0: 1, seg(7, 5): -1}]) == (0, 5)
