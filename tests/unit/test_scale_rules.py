"""Scale rules against the reference's examples and the cases of Pravega's own scale tests."""

import pytest

from app.domain.errors import IllegalState, InvalidInput
from app.domain.ids import segment_id as seg
from app.domain.records import (
    EpochRecord,
    EpochTransitionRecord,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
    StreamState,
)
from app.domain.scale_rules import (
    AUTO_SCALE_EVENT_VALIDITY_MS,
    COLD_FOREVER,
    ScaleCheck,
    ScaleStatus,
    auto_scale_event_expired,
    check_scale,
    cold_marker_until,
    compute_epoch_transition,
    etr_matches,
    is_cold,
    merge_candidates,
    merged_range,
    migrate_transition,
    new_epoch_record,
    segment_count_update,
    split_ranges,
    validate_scale,
)
from app.domain.scaling import initial_segments, uniform_key_ranges

T0 = 1_000


def epoch0(count: int, first_number: int = 0) -> EpochRecord:
    return EpochRecord(0, 0, initial_segments(count, first_number, T0), T0)


def scaled(active: EpochRecord, to_seal: list[int], ranges: list[tuple[float, float]]) -> EpochRecord:
    etr = compute_epoch_transition(active, to_seal, ranges, active.creation_time + 10)
    return new_epoch_record(active, etr).record


def duplicate(source: EpochRecord, epoch: int, reference_epoch: int) -> EpochRecord:
    """What a rolling transaction writes: same numbers and ranges, ids relabelled with the new epoch."""
    segments = tuple(
        SegmentRecord(s.number, epoch, source.creation_time + 1, s.key_start, s.key_end)
        for s in source.segments
    )
    return EpochRecord(
        epoch, reference_epoch, segments, source.creation_time + 1, source.splits, source.merges
    )


def rate_config(min_num_segments: int, scale_factor: int = 2) -> StreamConfig:
    return StreamConfig(
        ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, scale_factor, min_num_segments)
    )


FIVE = epoch0(5)
CHUNK = 1.0 / 5


# region validate_scale


def test_five_segment_doubles_are_javas() -> None:
    assert [s.key_start for s in FIVE.segments] == [0.0, 0.2, 0.4, 0.6000000000000001, 0.8]
    assert FIVE.segments[-1].key_end == 1.0


def test_valid_merge_of_neighbours() -> None:
    assert validate_scale(FIVE, [0, 1], [(0.0, 0.4)], 1) is ScaleCheck.OK


def test_disjoint_regions_are_valid() -> None:
    ranges = [(0.0, 0.4), (0.6000000000000001, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0)]
    assert validate_scale(FIVE, [0, 1, 3, 4], ranges, 1) is ScaleCheck.OK


def test_input_order_does_not_matter() -> None:
    ranges = [(0.9, 1.0), (0.6000000000000001, 0.7), (0.7, 0.8), (0.0, 0.4), (0.8, 0.9)]
    assert validate_scale(FIVE, [4, 0, 1, 3], ranges, 1) is ScaleCheck.OK


def test_merge_plus_disjoint_merge() -> None:
    assert validate_scale(FIVE, [1, 3, 4], [(CHUNK, 2 * CHUNK), (3 * CHUNK, 1.0)], 1) is ScaleCheck.OK


@pytest.mark.parametrize(
    ("to_seal", "ranges"),
    [
        pytest.param([1], [(0.2, 0.25), (0.3, 0.4)], id="gap"),
        pytest.param([1, 2], [(0.2, 0.4), (0.3, 0.6000000000000001)], id="overlap"),
        pytest.param([1], [(0.2, 0.35), (0.3, 0.4)], id="overlap-inside-segment"),
        pytest.param([1], [(0.2, 0.4), (0.3, 0.33)], id="a-contains-b"),
        pytest.param([1], [(0.2, 0.33), (0.2, 0.4)], id="b-contains-a-same-start"),
        pytest.param([0, 1], [(0.0, 0.2)], id="shorter"),
        pytest.param([0], [(0.0, 0.4)], id="longer"),
        pytest.param([0, 1], [], id="no-new-ranges"),
        pytest.param([], [(0.0, 0.2)], id="nothing-sealed"),
        pytest.param([0, 1], [(0.0, 0.2), (0.2, 0.2), (0.2, 0.4)], id="start-equals-end"),
        pytest.param([0, 1], [(0.0, 0.2), (0.3, 0.2), (0.2, 0.4)], id="start-after-end"),
        pytest.param([0, 1], [(0.0, 0.0), (0.0, 0.2), (0.2, 0.4)], id="java-quirk-0-0-not-copied"),
        pytest.param(
            [0, 1, 3, 4], [(0.0, 0.4), (0.6000000000000001, 0.7), (0.7, 0.9), (0.9, 0.99)], id="end-short"
        ),
        pytest.param([3], [(0.6, 0.8)], id="0.6-is-not-0.6000000000000001"),
        pytest.param([0], [(-0.0, 0.2)], id="negative-zero-differs-bitwise"),
        pytest.param([0, 0, 1], [(0.0, 0.4)], id="duplicate-seal-id"),
        pytest.param([0, 1], [(0.0, 0.6), (0.5, 0.4)], id="inverted-second-range"),
    ],
)
def test_bad_ranges_fail(to_seal: list[int], ranges: list[tuple[float, float]]) -> None:
    assert validate_scale(FIVE, to_seal, ranges, 1) is ScaleCheck.INVALID_RANGES


def test_exact_segment_double_is_valid() -> None:
    assert validate_scale(FIVE, [3], [(0.6000000000000001, 0.8)], 1) is ScaleCheck.OK


@pytest.mark.parametrize(
    "to_seal",
    [
        pytest.param([5], id="unknown-number"),
        pytest.param([0, 1, 5], id="one-unknown"),
        pytest.param([seg(0, 1)], id="right-number-wrong-epoch"),
    ],
)
def test_segments_not_in_active_epoch_fail_precondition(to_seal: list[int]) -> None:
    assert validate_scale(FIVE, to_seal, [(0.0, 0.2)], 1) is ScaleCheck.PRECONDITION_FAILED


def test_already_sealed_and_relabelled_ids_fail_precondition() -> None:
    epoch1 = scaled(FIVE, [1], [(0.2, 0.3), (0.3, 0.4)])
    assert validate_scale(epoch1, [1], [(0.2, 0.4)], 1) is ScaleCheck.PRECONDITION_FAILED
    assert validate_scale(epoch1, [seg(0, 1)], [(0.0, 0.2)], 1) is ScaleCheck.PRECONDITION_FAILED
    # Carried segments keep their epoch-0 ids.
    assert validate_scale(epoch1, [0, seg(5, 1)], [(0.0, 0.3)], 1) is ScaleCheck.OK


def test_precondition_is_checked_before_ranges() -> None:
    assert validate_scale(FIVE, [7], [(0.5, 0.1)], 1) is ScaleCheck.PRECONDITION_FAILED


def test_ranges_are_checked_before_min_count() -> None:
    assert validate_scale(FIVE, [0, 1], [(0.0, 0.3)], 5) is ScaleCheck.INVALID_RANGES


def test_min_segment_count() -> None:
    assert validate_scale(FIVE, [0, 1], [(0.0, 0.4)], 5) is ScaleCheck.PRECONDITION_FAILED
    assert validate_scale(FIVE, [0, 1], [(0.0, 0.4)], 4) is ScaleCheck.OK
    assert validate_scale(FIVE, [0], [(0.0, 0.1), (0.1, 0.2)], 6) is ScaleCheck.OK


def test_fixed_2_to_49_cannot_scale() -> None:
    two = epoch0(2)
    ranges = segment_count_update(StreamConfig(ScalingPolicy.fixed(49)), two)
    assert ranges is not None
    assert len(ranges) == 49
    assert ranges[-1][1] == 0.9999999999999999
    assert validate_scale(two, [0, 1], ranges, 49) is ScaleCheck.INVALID_RANGES


def test_fixed_2_to_48_can_scale() -> None:
    two = epoch0(2)
    ranges = segment_count_update(StreamConfig(ScalingPolicy.fixed(48)), two)
    assert ranges is not None
    assert validate_scale(two, [0, 1], ranges, 48) is ScaleCheck.OK


# endregion

# region etr_matches


def _pending() -> EpochTransitionRecord:
    return compute_epoch_transition(FIVE, [0, 1, 3, 4], [(0.0, 0.4), (0.6000000000000001, 1.0)], T0)


def test_identical_input_matches() -> None:
    assert etr_matches(_pending(), [4, 3, 1, 0], [(0.6000000000000001, 1.0), (0.0, 0.4)])


def test_subset_matches() -> None:
    assert etr_matches(_pending(), [1], [(0.0, 0.4)])
    assert etr_matches(_pending(), [], [])


@pytest.mark.parametrize(
    ("to_seal", "ranges"),
    [
        pytest.param([0, 1, 2], [(0.0, 0.4)], id="extra-segment"),
        pytest.param([seg(0, 1)], [(0.0, 0.4)], id="right-number-wrong-epoch"),
        pytest.param([0], [(0.0, 0.4), (0.4, 0.6000000000000001)], id="extra-range"),
        pytest.param([0], [(0.6, 1.0)], id="range-one-ulp-off"),
        pytest.param([0], [(0.0, 0.2)], id="sealed-range-is-not-a-new-range"),
    ],
)
def test_different_input_does_not_match(to_seal: list[int], ranges: list[tuple[float, float]]) -> None:
    assert not etr_matches(_pending(), to_seal, ranges)


# endregion

# region compute_epoch_transition and new_epoch_record


def test_split_numbers_new_segments_in_ascending_start_order() -> None:
    two = epoch0(2)
    etr = compute_epoch_transition(two, [1], [(0.75, 1.0), (0.5, 0.75)], 5_000)
    assert etr == EpochTransitionRecord(
        active_epoch=0,
        time=5_000,
        segments_to_seal=frozenset({1}),
        new_segments=((seg(2, 1), 0.5, 0.75), (seg(3, 1), 0.75, 1.0)),
    )
    assert etr.new_epoch == 1


def test_new_numbers_follow_the_highest_active_number() -> None:
    recreated = epoch0(3, first_number=3)
    etr = compute_epoch_transition(recreated, [seg(4, 0)], [(1 / 3, 2 / 3)], T0)
    assert etr.new_segments == ((seg(6, 1), 1 / 3, 2 / 3),)

    epoch1 = scaled(epoch0(3), [0, 1], [(0.0, 2 / 3)])  # numbers 2, 3
    etr2 = compute_epoch_transition(epoch1, [seg(3, 1)], [(0.0, 0.5), (0.5, 2 / 3)], T0)
    assert [s[0] for s in etr2.new_segments] == [seg(4, 2), seg(5, 2)]


def test_transition_refuses_segments_outside_the_epoch() -> None:
    with pytest.raises(IllegalState):
        compute_epoch_transition(FIVE, [seg(0, 1)], [(0.0, 0.2)], T0)


def test_new_epoch_record_for_a_split() -> None:
    two = epoch0(2)
    etr = compute_epoch_transition(two, [1], [(0.5, 0.75), (0.75, 1.0)], 5_000)
    change = new_epoch_record(two, etr)
    assert change.record == EpochRecord(
        epoch=1,
        reference_epoch=1,
        segments=(
            two.segments[0],
            SegmentRecord(2, 1, 5_000, 0.5, 0.75),
            SegmentRecord(3, 1, 5_000, 0.75, 1.0),
        ),
        creation_time=5_000,
        splits=1,
        merges=0,
    )
    assert change.sealed == (1,)
    assert change.created == (seg(2, 1), seg(3, 1))


@pytest.mark.parametrize(("scale_time", "expected"), [(T0 - 50, T0 + 1), (T0, T0 + 1), (T0 + 7, T0 + 7)])
def test_epoch_creation_time_grows_strictly(scale_time: int, expected: int) -> None:
    two = epoch0(2)
    change = new_epoch_record(two, compute_epoch_transition(two, [0], [(0.0, 0.5)], scale_time))
    assert change.record.creation_time == expected
    assert {s.creation_time for s in change.record.segments if s.creation_epoch == 1} == {expected}


def test_cumulative_splits_and_merges() -> None:
    two = epoch0(2)
    e1 = scaled(two, [0, 1], [(0.0, 0.2), (0.2, 0.4), (0.4, 0.5), (0.5, 0.7), (0.7, 1.0)])
    assert (e1.splits, e1.merges) == (2, 0)
    e2 = scaled(e1, [s.id for s in e1.segments], [(0.0, 0.4), (0.4, 0.7), (0.7, 0.8), (0.8, 1.0)])
    assert (e2.splits, e2.merges) == (3, 2)
    e3 = scaled(e2, [s.id for s in e2.segments], [(0.0, 0.7), (0.7, 1.0)])
    assert (e3.splits, e3.merges) == (3, 4)


def test_carried_segments_are_neither_splits_nor_merges() -> None:
    e1 = scaled(FIVE, [0, 1], [(0.0, 0.4)])
    assert (e1.splits, e1.merges) == (0, 1)
    assert [s.id for s in e1.segments] == [2, 3, 4, seg(5, 1)]


def test_new_epoch_record_refuses_another_epoch() -> None:
    two = epoch0(2)
    etr = compute_epoch_transition(two, [0], [(0.0, 0.5)], T0)
    epoch1 = new_epoch_record(two, etr).record
    with pytest.raises(IllegalState):
        new_epoch_record(epoch1, etr)


# endregion

# region migrate_transition


def _rolled() -> tuple[EpochRecord, EpochTransitionRecord, EpochRecord]:
    """Epoch 1 with a pending manual scale; a rolling txn then wrote epochs 2 (dup of 0) and 3 (dup of 1)."""
    epoch1 = scaled(epoch0(2), [1], [(0.5, 0.75), (0.75, 1.0)])  # seg(0,0), seg(2,1), seg(3,1)
    etr = compute_epoch_transition(epoch1, [0], [(0.0, 0.25), (0.25, 0.5)], 9_000)
    assert etr.new_segments[0][0] == seg(4, 2)
    return epoch1, etr, duplicate(epoch1, 3, 1)


def test_manual_scale_migrates_to_duplicate_epoch() -> None:
    epoch1, etr, epoch3 = _rolled()
    migrated = migrate_transition(etr, epoch1, epoch3, manual=True)
    assert migrated == EpochTransitionRecord(
        active_epoch=3,
        time=9_000,
        segments_to_seal=frozenset({seg(0, 3)}),
        new_segments=((seg(4, 4), 0.0, 0.25), (seg(5, 4), 0.25, 0.5)),
    )
    change = new_epoch_record(epoch3, migrated)
    assert change.record.epoch == change.record.reference_epoch == 4
    assert [s.id for s in change.record.segments] == [seg(2, 3), seg(3, 3), seg(4, 4), seg(5, 4)]
    assert change.sealed == (seg(0, 3),)


def test_manual_scale_on_current_epoch_is_unchanged() -> None:
    epoch1, etr, _ = _rolled()
    assert migrate_transition(etr, epoch1, epoch1, manual=True) is etr


def test_manual_scale_is_discarded_when_reference_epochs_differ() -> None:
    epoch1, etr, _ = _rolled()
    epoch3 = duplicate(epoch1, 3, 3)
    assert migrate_transition(etr, epoch1, epoch3, manual=True) is None


def test_auto_scale_is_discarded_once_its_epoch_is_not_ahead() -> None:
    epoch1, etr, epoch3 = _rolled()
    assert migrate_transition(etr, epoch1, epoch1, manual=False) is etr
    assert migrate_transition(etr, epoch1, epoch3, manual=False) is None
    assert migrate_transition(etr, epoch1, duplicate(epoch1, 2, 1), manual=False) is None


def test_migration_needs_the_transition_epoch_record() -> None:
    _, etr, epoch3 = _rolled()
    with pytest.raises(IllegalState):
        migrate_transition(etr, epoch3, epoch3, manual=True)


# endregion

# region check_scale


def test_check_scale_branches() -> None:
    epoch2 = EpochRecord(2, 2, FIVE.segments, T0)
    pending_next = EpochTransitionRecord(2, T0, frozenset({0}), ((seg(5, 3), 0.0, 0.2),))
    pending_done = EpochTransitionRecord(1, T0, frozenset({0}), ((seg(5, 2), 0.0, 0.2),))
    active = StreamState.ACTIVE
    scaling = StreamState.SCALING
    assert check_scale(3, epoch2, active, None) is ScaleStatus.INVALID_INPUT
    assert check_scale(2, epoch2, active, None) is ScaleStatus.IN_PROGRESS
    assert check_scale(1, epoch2, scaling, None) is ScaleStatus.IN_PROGRESS
    assert check_scale(1, epoch2, scaling, pending_done) is ScaleStatus.IN_PROGRESS
    assert check_scale(1, epoch2, scaling, pending_next) is ScaleStatus.SUCCESS
    assert check_scale(1, epoch2, active, None) is ScaleStatus.SUCCESS
    assert check_scale(0, epoch2, scaling, None) is ScaleStatus.SUCCESS


def test_check_scale_on_duplicate_epoch_uses_reference_epoch() -> None:
    epoch3 = EpochRecord(3, 1, FIVE.segments, T0)
    assert check_scale(1, epoch3, StreamState.ACTIVE, None) is ScaleStatus.IN_PROGRESS
    assert check_scale(0, epoch3, StreamState.SCALING, None) is ScaleStatus.IN_PROGRESS
    assert check_scale(0, epoch3, StreamState.ACTIVE, None) is ScaleStatus.SUCCESS
    assert check_scale(2, epoch3, StreamState.SCALING, None) is ScaleStatus.SUCCESS


def test_check_scale_rejects_negative_epoch() -> None:
    with pytest.raises(InvalidInput):
        check_scale(-1, FIVE, StreamState.ACTIVE, None)


# endregion

# region segment_count_update


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(StreamConfig(ScalingPolicy.fixed(3)), None, id="fixed-same"),
        pytest.param(StreamConfig(ScalingPolicy.fixed(2)), 2, id="fixed-fewer"),
        pytest.param(StreamConfig(ScalingPolicy.fixed(4)), 4, id="fixed-more"),
        pytest.param(rate_config(5), 5, id="rate-min-raised"),
        pytest.param(rate_config(3), None, id="rate-min-same"),
        pytest.param(rate_config(2), None, id="rate-min-lowered"),
    ],
)
def test_segment_count_update(config: StreamConfig, expected: int | None) -> None:
    result = segment_count_update(config, epoch0(3))
    assert result == (None if expected is None else uniform_key_ranges(expected))


def test_segment_count_update_counts_active_segments_not_numbers() -> None:
    epoch1 = scaled(epoch0(2), [1], [(0.5, 0.75), (0.75, 1.0)])
    assert segment_count_update(StreamConfig(ScalingPolicy.fixed(3)), epoch1) is None
    assert segment_count_update(rate_config(4), epoch1) == uniform_key_ranges(4)


# endregion

# region auto-scale


def test_event_validity_and_cold_markers() -> None:
    assert AUTO_SCALE_EVENT_VALIDITY_MS == 600_000
    assert not auto_scale_event_expired(T0, T0 + 599_999)
    assert auto_scale_event_expired(T0, T0 + 600_000)
    assert cold_marker_until(T0, silent=False) == T0 + 600_000
    assert cold_marker_until(T0, silent=True) == COLD_FOREVER == 2**63 - 1
    assert is_cold(T0 + 1, T0)
    assert not is_cold(T0, T0)
    assert not is_cold(None, T0)


@pytest.mark.parametrize(
    ("num_of_splits", "scale_factor", "pieces"),
    [(1, 2, 2), (0, 0, 2), (5, 1, 2), (10, 3, 3), (2, 5, 2), (4, 5, 4)],
)
def test_split_count_is_clamped(num_of_splits: int, scale_factor: int, pieces: int) -> None:
    assert len(split_ranges(FIVE.segments[0], num_of_splits, scale_factor)) == pieces


def test_split_pieces_share_bounds_and_end_exactly() -> None:
    segment = SegmentRecord(0, 0, T0, 0.1, 1.0)
    delta = (1.0 - 0.1) / 3
    assert 0.1 + delta * 3 != 1.0  # why the last end is not computed
    assert split_ranges(segment, 3, 3) == [
        (0.1, 0.1 + delta),
        (0.1 + delta, 0.1 + delta * 2),
        (0.1 + delta * 2, 1.0),
    ]
    epoch = EpochRecord(0, 0, (segment,), T0)
    assert validate_scale(epoch, [0], split_ranges(segment, 3, 3), 1) is ScaleCheck.OK


def test_auto_scale_up_then_two_cold_neighbours_merge() -> None:
    three = epoch0(3)
    min_segments = 1
    up = split_ranges(three.segments[2], num_of_splits=1, scale_factor=2)
    start, end = 2 / 3, 1.0
    assert up == [(start, start + (end - start) / 2), (start + (end - start) / 2, end)]
    etr = compute_epoch_transition(three, [2], up, T0 + 5)
    assert [s[0] for s in etr.new_segments] == [seg(3, 1), seg(4, 1)]
    epoch1 = new_epoch_record(three, etr).record
    three_1, four_1 = seg(3, 1), seg(4, 1)

    assert merge_candidates(four_1, epoch1, {four_1}, min_segments) == []

    to_merge = merge_candidates(three_1, epoch1, {three_1, four_1}, min_segments)
    assert [s.id for s in to_merge] == [three_1, four_1]
    assert merged_range(to_merge) == (start, end)
    to_seal = [s.id for s in to_merge]
    assert validate_scale(epoch1, to_seal, [merged_range(to_merge)], min_segments) is ScaleCheck.OK
    down = compute_epoch_transition(epoch1, to_seal, [merged_range(to_merge)], T0 + 9)
    assert down.new_segments == ((seg(5, 2), start, end),)


def test_auto_scale_down_respects_the_minimum() -> None:
    five, minimum = epoch0(5), 4
    assert merge_candidates(1, five, {1}, minimum) == []
    assert merge_candidates(3, five, {1, 3}, minimum) == []  # 3 is not a neighbour of 1
    event_a = merge_candidates(0, five, {0, 1, 3}, minimum)
    assert [s.id for s in event_a] == [0, 1]
    event_b = merge_candidates(4, five, {0, 1, 3, 4}, minimum)
    assert [s.id for s in event_b] == [3, 4]

    epoch1 = scaled(five, [0, 1], [merged_range(event_a)])
    assert sorted(s.number for s in epoch1.segments) == [2, 3, 4, 5]
    b_seal = [s.id for s in event_b]
    assert validate_scale(epoch1, b_seal, [merged_range(event_b)], minimum) is ScaleCheck.PRECONDITION_FAILED


def test_three_cold_one_above_the_floor_merges_the_lower_pair() -> None:
    assert [s.id for s in merge_candidates(2, FIVE, {1, 2, 3}, 4)] == [1, 2]
    assert [s.id for s in merge_candidates(2, FIVE, {1, 2, 3}, 3)] == [1, 2, 3]


def test_no_merge_at_the_floor_or_for_inactive_segments() -> None:
    assert merge_candidates(2, FIVE, {1, 2, 3}, 5) == []
    assert merge_candidates(seg(2, 1), FIVE, {1, 2, 3, seg(2, 1)}, 1) == []


def test_neighbours_need_exactly_equal_bounds() -> None:
    left = SegmentRecord(0, 0, T0, 0.0, 0.5)
    right = SegmentRecord(1, 0, T0, 0.5000000000000001, 1.0)
    epoch = EpochRecord(0, 0, (left, right), T0)
    assert merge_candidates(1, epoch, {0, 1}, 1) == []


# endregion
