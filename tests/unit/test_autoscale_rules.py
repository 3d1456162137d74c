"""Auto-scaling rules: the controller's AutoScaleTask decisions against Pravega's
testScaleRequest and testScaleRequestWithMinimumSegment, and the segment-store side:
traffic averages, when a report is due, cooldown and mute."""

from __future__ import annotations

import math

import pytest

from app.domain.autoscale import (
    ACCEPTED,
    COOLDOWN_MS,
    EXPIRED,
    MUTE_MS,
    PRAVEGA_WINDOWS,
    AutoScaleDecision,
    MuteRecord,
    ScaleDirection,
    ScaleReport,
    SegmentAggregates,
    TrafficRates,
    TrafficVerdict,
    TrafficWindows,
    cold_segments,
    decide,
    decision_check,
    parse_stream_segment_name,
    scale_down,
    scale_up,
    scales_automatically,
    traffic_verdict,
)
from app.domain.errors import InvalidInput
from app.domain.ids import segment_id as seg
from app.domain.records import EpochRecord, ScaleType, ScalingPolicy, SegmentRecord
from app.domain.scale_rules import (
    COLD_FOREVER,
    ScaleCheck,
    cold_marker_until,
    compute_epoch_transition,
    new_epoch_record,
)
from app.domain.scaling import initial_segments

T0 = 1_700_000_000_000
MINUTE = 60_000


def epoch0(count: int) -> EpochRecord:
    return EpochRecord(0, 0, initial_segments(count, 0, T0), T0)


def by_events(min_segments: int, scale_factor: int = 2, target: int = 1) -> ScalingPolicy:
    return ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, target, scale_factor, min_segments)


def report(segment: int, direction: ScaleDirection, splits: int = 0, silent: bool = False) -> ScaleReport:
    return ScaleReport(segment, direction, T0, splits, silent)


def apply(active: EpochRecord, decision: AutoScaleDecision, at: int) -> EpochRecord:
    etr = compute_epoch_transition(active, decision.to_seal, decision.new_ranges, at)
    return new_epoch_record(active, etr).record


def ids(epoch: EpochRecord) -> set[int]:
    return {s.id for s in epoch.segments}


# region reports


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("UP", ScaleDirection.UP),
        ("DOWN", ScaleDirection.DOWN),
        (0, ScaleDirection.UP),
        (1, ScaleDirection.DOWN),
        (ScaleDirection.DOWN, ScaleDirection.DOWN),
    ],
)
def test_direction_accepts_names_and_javas_bytes(raw: object, parsed: ScaleDirection) -> None:
    assert ScaleDirection.parse(raw) is parsed
    assert parsed.wire_code == (0 if parsed is ScaleDirection.UP else 1)


@pytest.mark.parametrize("raw", ["up", "SIDEWAYS", 2, -1, True, None, 0.0])
def test_direction_rejects_anything_else(raw: object) -> None:
    with pytest.raises(InvalidInput, match="direction must be UP or DOWN"):
        ScaleDirection.parse(raw)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((-1, "UP", T0, 2, False), "segmentId must be within"),
        ((2**63, "UP", T0, 2, False), "segmentId must be within"),
        (("1", "UP", T0, 2, False), "segmentId must be an integer"),
        ((True, "UP", T0, 2, False), "segmentId must be an integer"),
        ((1, "LEFT", T0, 2, False), "direction"),
        ((1, "UP", -5, 2, False), "timestamp must be within"),
        ((1, "UP", 1.5, 2, False), "timestamp must be an integer"),
        ((1, "UP", T0, -1, False), "numOfSplits must be within"),
        ((1, "UP", T0, 2**31, False), "numOfSplits must be at most"),
        ((1, "DOWN", T0, 0, "yes"), "silent must be a boolean"),
        ((1, "DOWN", T0, 0, 0), "silent must be a boolean"),
    ],
)
def test_malformed_reports_are_refused(fields: tuple[object, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        ScaleReport.build(*fields)


def test_report_round_trips_through_its_payload() -> None:
    original = ScaleReport.build(seg(4, 1), "DOWN", T0, 0, True)
    assert ScaleReport.from_payload(original.to_payload()) == original
    assert original.to_payload() == {
        "segment_id": seg(4, 1),
        "direction": "DOWN",
        "timestamp": T0,
        "num_of_splits": 0,
        "silent": True,
    }


def test_a_payload_without_a_field_is_refused() -> None:
    payload = ScaleReport.build(1, "UP", T0, 2, False).to_payload()
    del payload["timestamp"]
    with pytest.raises(InvalidInput, match="lacks 'timestamp'"):
        ScaleReport.from_payload(payload)


def test_intake_answers() -> None:
    assert ACCEPTED.accepted and ACCEPTED.reason is None
    assert not EXPIRED.accepted and EXPIRED.reason == "expired"


# endregion

# region the controller's AutoScaleTask


def test_pravega_test_scale_request() -> None:
    """byEventRate(1, 2, 1) over 3 segments: UP on 2 splits it in two despite numOfSplits 1; a DOWN
    on 4 only marks it; a DOWN on its neighbour 3 merges both back to [2/3, 1)."""
    policy = by_events(min_segments=1)
    epoch = epoch0(3)

    up = decide(report(2, ScaleDirection.UP, splits=1), policy, epoch, frozenset())
    assert up is not None
    start, end = 2.0 / 3.0, 1.0
    middle = start + (end - start) / 2
    assert up == AutoScaleDecision((2,), ((start, middle), (middle, end)))
    assert decision_check(up, epoch, policy) is ScaleCheck.OK
    epoch = apply(epoch, up, T0 + 1)
    three, four = seg(3, 1), seg(4, 1)
    assert ids(epoch) == {0, 1, three, four}

    cold = cold_segments({four: cold_marker_until(T0, silent=False)}, T0 + 1)
    assert decide(report(four, ScaleDirection.DOWN), policy, epoch, cold) is None

    cold = cold_segments({four: T0 + 10 * MINUTE, three: T0 + 10 * MINUTE}, T0 + 2)
    down = decide(report(three, ScaleDirection.DOWN), policy, epoch, cold)
    assert down == AutoScaleDecision((three, four), ((start, end),))
    assert decision_check(down, epoch, policy) is ScaleCheck.OK
    epoch = apply(epoch, down, T0 + 3)
    assert ids(epoch) == {0, 1, seg(5, 2)}


def test_pravega_test_scale_request_with_minimum_segment() -> None:
    """min 4 over 5 segments: cold 1, cold 3 (not a neighbour of 1) only mark; cold 0 asks to merge
    {0, 1} (A); cold 4 asks to merge {3, 4} (B); A goes through, B then fails the minimum."""
    policy = by_events(min_segments=4)
    five = epoch0(5)
    marked: dict[int, int] = {}

    def down(segment: int) -> AutoScaleDecision | None:
        marked[segment] = cold_marker_until(T0, silent=False)
        return decide(report(segment, ScaleDirection.DOWN), policy, five, cold_segments(marked, T0 + 1))

    assert down(1) is None
    assert down(3) is None
    event_a = down(0)
    assert event_a == AutoScaleDecision((0, 1), ((0.0, 0.4),))
    event_b = down(4)
    assert event_b == AutoScaleDecision((3, 4), ((0.6000000000000001, 1.0),))

    assert event_a is not None and event_b is not None
    assert decision_check(event_a, five, policy) is ScaleCheck.OK
    after_a = apply(five, event_a, T0 + 2)
    assert sorted(s.number for s in after_a.segments) == [2, 3, 4, 5]
    assert decision_check(event_b, after_a, policy) is ScaleCheck.PRECONDITION_FAILED


def test_fixed_policy_ignores_every_report() -> None:
    fixed = ScalingPolicy.fixed(3)
    assert not scales_automatically(fixed)
    assert scales_automatically(by_events(1))
    epoch = epoch0(3)
    assert decide(report(0, ScaleDirection.UP, splits=4), fixed, epoch, frozenset()) is None
    assert decide(report(0, ScaleDirection.DOWN), fixed, epoch, frozenset({0, 1})) is None


def test_up_on_a_segment_that_is_not_active_asks_for_nothing() -> None:
    epoch = apply(epoch0(2), AutoScaleDecision((1,), ((0.5, 0.75), (0.75, 1.0))), T0 + 1)
    assert scale_up(1, 2, by_events(1), epoch) is None
    assert scale_up(seg(9, 9), 2, by_events(1), epoch) is None


def test_up_is_clamped_by_the_scale_factor_and_ends_exactly() -> None:
    epoch = epoch0(5)
    decision = scale_up(3, 10, by_events(1, scale_factor=3), epoch)
    assert decision is not None and len(decision.new_ranges) == 3
    segment = epoch.segments[3]
    assert decision.new_ranges[0][0] == segment.key_start
    assert decision.new_ranges[-1][1] == segment.key_end
    for (_, left_end), (right_start, _) in zip(decision.new_ranges, decision.new_ranges[1:], strict=False):
        assert left_end == right_start
    assert decision_check(decision, epoch, by_events(1, scale_factor=3)) is ScaleCheck.OK


def test_a_segment_too_narrow_to_split_is_refused_not_crashed() -> None:
    narrow = SegmentRecord(0, 0, T0, 0.5, math.nextafter(0.5, 1.0))
    epoch = EpochRecord(
        0, 0, (SegmentRecord(1, 0, T0, 0.0, 0.5), narrow, SegmentRecord(2, 0, T0, narrow.key_end, 1.0)), T0
    )
    decision = scale_up(0, 2, by_events(1), epoch)
    assert decision is not None
    assert decision_check(decision, epoch, by_events(1)) is ScaleCheck.INVALID_RANGES


def test_down_with_three_cold_one_above_the_floor_takes_the_first_two() -> None:
    five = epoch0(5)
    cold = frozenset({1, 2, 3})
    assert scale_down(2, by_events(4), five, cold) == AutoScaleDecision((1, 2), ((0.2, 0.6000000000000001),))
    assert scale_down(2, by_events(3), five, cold) == AutoScaleDecision((1, 2, 3), ((0.2, 0.8),))
    assert scale_down(2, by_events(5), five, cold) is None  # at the floor: the mark is all


def test_cold_markers_expire_and_silent_ones_never_do() -> None:
    markers = {0: T0 + 10 * MINUTE, 1: cold_marker_until(T0, silent=True), 2: T0}
    assert markers[1] == COLD_FOREVER
    assert cold_segments(markers, T0) == {0, 1}
    assert cold_segments(markers, T0 + 10 * MINUTE) == {1}
    assert cold_segments({}, T0) == frozenset()


# endregion

# region the segment store's side


def feed(
    aggregates: SegmentAggregates, start: int, minutes: float, events_per_s: float, step_s: int = 6
) -> int:
    """Steady traffic; returns the time reached. 6-second steps: one average tick per step."""
    now = start
    for _ in range(int(minutes * 60 / step_s)):
        now += step_s * 1000
        aggregates.update(int(events_per_s * step_s), int(events_per_s * step_s) * 1024, now)
    return now


def test_steady_traffic_settles_every_average_at_its_rate() -> None:
    aggregates = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    feed(aggregates, T0, 3, events_per_s=25)
    rates = aggregates.rates
    for rate in (rates.two_minute, rates.five_minute, rates.ten_minute, rates.twenty_minute):
        assert rate == pytest.approx(25)


def test_throughput_is_measured_in_kib() -> None:
    aggregates = SegmentAggregates(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 10, T0)
    feed(aggregates, T0, 1, events_per_s=3)  # 3 KiB a second
    assert aggregates.rates.two_minute == pytest.approx(3)


def test_silence_decays_the_short_average_faster() -> None:
    aggregates = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    now = feed(aggregates, T0, 5, events_per_s=20)
    aggregates.update(1, 0, now + 3 * MINUTE)  # three silent minutes, then one event
    rates = aggregates.rates
    assert rates.two_minute < rates.five_minute < rates.ten_minute < rates.twenty_minute < 20


def test_a_tick_needs_more_than_five_seconds() -> None:
    aggregates = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    aggregates.update(50, 0, T0 + 5_000)
    assert aggregates.rates.two_minute == 0
    aggregates.update(10, 0, T0 + 6_000)
    assert aggregates.rates.two_minute == pytest.approx(10)


def test_fixed_or_targetless_policies_are_not_aggregated() -> None:
    with pytest.raises(InvalidInput):
        SegmentAggregates(ScaleType.FIXED_NUM_SEGMENTS, 10, T0)
    with pytest.raises(InvalidInput):
        SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 0, T0)


def test_reports_are_due_once_per_interval() -> None:
    aggregates = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    assert not aggregates.report_due(T0 + 2 * MINUTE)
    assert aggregates.report_due(T0 + 2 * MINUTE + 1)
    assert not aggregates.report_due(T0 + 3 * MINUTE)
    assert aggregates.report_due(T0 + 4 * MINUTE + 2)


def test_the_default_windows_are_pravegas_to_the_bit() -> None:
    # SegmentAggregates' M2/M5/M10/M20_ALPHA: 1 - exp(-5 / 60 / minutes), in Java's order.
    assert PRAVEGA_WINDOWS.alphas == tuple(1 - math.exp(-5 / 60 / m) for m in (2, 5, 10, 20))
    assert PRAVEGA_WINDOWS.windows_ms == (2 * MINUTE, 5 * MINUTE, 10 * MINUTE, 20 * MINUTE)
    assert (PRAVEGA_WINDOWS.tick_ms, PRAVEGA_WINDOWS.reporting_interval_ms) == (5_000, 2 * MINUTE)


def test_scaled_windows_keep_the_weights_and_shrink_every_duration() -> None:
    fast = PRAVEGA_WINDOWS.scaled(0.01)
    assert fast == TrafficWindows(50, 1_200, 3_000, 6_000, 12_000, 1_200)
    assert fast.alphas == pytest.approx(PRAVEGA_WINDOWS.alphas)
    # The same traffic, a hundred times faster, gives the same averages (rates per real second).
    slow = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    quick = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0, fast)
    feed(slow, T0, 3, events_per_s=50)  # 300 events every 6 s
    for step in range(1, 31):
        quick.update(3, 0, T0 + step * 60)  # 3 events every 60 ms
    assert quick.rates.two_minute == pytest.approx(slow.rates.two_minute)
    assert quick.report_due(T0 + 1_201) and not slow.report_due(T0 + 1_201)
    hot = rates(100, 100, 100, 100)
    assert traffic_verdict(hot, 10, T0, T0 + 1_201, 0, fast) == TrafficVerdict(ScaleDirection.UP, 10)
    assert traffic_verdict(hot, 10, T0, T0 + 1_201, 0) is None
    cold = rates(1, 1, 1, 1)
    assert traffic_verdict(cold, 10, T0, T0 + 12_001, 0, fast) == TrafficVerdict(ScaleDirection.DOWN, 0)
    for factor in (0, 1.5, -1):
        with pytest.raises(InvalidInput):
            PRAVEGA_WINDOWS.scaled(factor)


def test_a_merged_transaction_counts_a_ticks_share_of_its_life() -> None:
    """Pravega's updateTx: under a tick of life it is ordinary traffic; otherwise its events and
    bytes are scaled by tick / lifetime (integer division, as Java's)."""
    short = SegmentAggregates(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, T0)
    short.update_transaction(100, 0, T0 + 1_000, T0 + 4_999)
    short.update(0, 0, T0 + 6_000)
    assert short.rates.two_minute == pytest.approx(100 / 6)
    long = SegmentAggregates(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 10, T0)
    long.update_transaction(100, 30_000 * 1024, T0 - 24_000, T0 + 6_000)  # lived 30 s
    assert long.rates.two_minute == pytest.approx(30_000 * 1024 * 5_000 // 30_000 / 1024 / 6)


def rates(two: float, five: float, ten: float, twenty: float) -> TrafficRates:
    return TrafficRates(two, five, ten, twenty)


def test_nothing_is_reported_during_the_cooldown() -> None:
    hot = rates(100, 100, 100, 100)
    assert traffic_verdict(hot, 10, T0, T0 + COOLDOWN_MS) is None
    assert traffic_verdict(hot, 10, T0, T0 + COOLDOWN_MS + 1) == TrafficVerdict(ScaleDirection.UP, 10)


@pytest.mark.parametrize(
    ("observed", "splits"),
    [
        (rates(51, 0, 0, 0), 5),  # two-minute rate above 5x the target
        (rates(0, 21, 0, 0), 2),  # five-minute rate above 2x
        (rates(0, 0, 11, 0), 2),  # ten-minute rate above the target: at least 2 pieces
        (rates(30, 45, 12, 0), 4),  # the highest of the three decides
    ],
)
def test_scale_up_conditions_and_splits(observed: TrafficRates, splits: int) -> None:
    assert traffic_verdict(observed, 10, T0, T0 + 11 * MINUTE) == TrafficVerdict(ScaleDirection.UP, splits)


def test_moderate_traffic_reports_nothing() -> None:
    assert traffic_verdict(rates(40, 19, 9, 8), 10, T0, T0 + 30 * MINUTE) is None


def test_scale_down_needs_every_average_low_and_twenty_minutes() -> None:
    cold = rates(9, 9, 9, 4.9)
    assert traffic_verdict(cold, 10, T0, T0 + 20 * MINUTE) is None
    assert traffic_verdict(cold, 10, T0, T0 + 20 * MINUTE + 1) == TrafficVerdict(ScaleDirection.DOWN, 0)
    assert traffic_verdict(rates(9, 9, 9, 5), 10, T0, T0 + 30 * MINUTE) is None


def test_mute_rules() -> None:
    created = MuteRecord.created(T0)
    assert not created.allows(ScaleDirection.UP, T0 + MUTE_MS)
    assert created.allows(ScaleDirection.UP, T0 + MUTE_MS + 1)
    assert created.allows(ScaleDirection.DOWN, T0 + MUTE_MS + 1)

    after_up = created.after_report(ScaleDirection.UP, T0 + 20 * MINUTE, silent=False)
    assert after_up == MuteRecord(T0 + 20 * MINUTE, T0 + 20 * MINUTE)
    assert not after_up.allows(ScaleDirection.DOWN, T0 + 25 * MINUTE)

    # Java writes (0, ts) after a DOWN, which lifts a pending UP mute.
    after_down = after_up.after_report(ScaleDirection.DOWN, T0 + 31 * MINUTE, silent=False)
    assert after_down == MuteRecord(0, T0 + 31 * MINUTE)
    assert after_down.allows(ScaleDirection.UP, T0 + 32 * MINUTE)
    assert not after_down.allows(ScaleDirection.DOWN, T0 + 32 * MINUTE)

    assert after_up.after_report(ScaleDirection.DOWN, T0 + 40 * MINUTE, silent=True) == after_up


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("sc/st/3.#epoch.1", ("sc", "st", seg(3, 1))),
        ("sc/st/0.#epoch.0", ("sc", "st", 0)),
        ("sc/st/3.#epoch.1#transaction.0000000000000001000000000000000a", None),
        ("sc/st/3", None),
        ("sc/3.#epoch.1", None),
        ("sc/st/x.#epoch.1", None),
        ("sc/st/²1.#epoch.1", None),
        ("sc/st/4294967296.#epoch.1", None),
        ("/st/3.#epoch.1", None),
    ],
)
def test_stream_segment_names(name: str, parsed: tuple[str, str, int] | None) -> None:
    assert parse_stream_segment_name(name) == parsed


# endregion
