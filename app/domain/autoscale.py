"""Auto-scaling rules, both sides of Pravega's loop: what a segment store reports from its traffic
(AutoScaleEvents) and what the controller makes of a report against the active epoch (AutoScaleTask).

Pure: every function takes the time it judges at. The split and merge arithmetic itself lives in
scale_rules (exact IEEE doubles, shared with manual scale); this module decides when to use it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields
from typing import Any

from app.domain.errors import InvalidInput
from app.domain.ids import segment_id as make_segment_id
from app.domain.limits import MAX_SEGMENTS_PER_EPOCH
from app.domain.records import EpochRecord, ScaleType, ScalingPolicy
from app.domain.scale_rules import (
    KeyRange,
    ScaleCheck,
    is_cold,
    merge_candidates,
    merged_range,
    split_ranges,
    validate_scale,
)
from app.domain.segment_names import parse_stream_segment_name as parse_segment_name
from app.domain.validation import check_timestamp

_MAX_ID = 2**63 - 1  # ids, timestamps and counts travel as Java longs


# region reports (what a segment store sends: Pravega's AutoScaleEvent)


class ScaleDirection(enum.Enum):
    UP = "UP"
    DOWN = "DOWN"

    @property
    def wire_code(self) -> int:
        """AutoScaleEvent's byte: UP 0, DOWN 1."""
        return 0 if self is ScaleDirection.UP else 1

    @staticmethod
    def parse(value: object) -> ScaleDirection:
        """ "UP"/"DOWN" as JSON carries it, or Pravega's byte 0/1."""
        if isinstance(value, ScaleDirection):
            return value
        if isinstance(value, str) and value in ("UP", "DOWN"):
            return ScaleDirection(value)
        if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
            return ScaleDirection.UP if value == 0 else ScaleDirection.DOWN
        raise InvalidInput(f"direction must be UP or DOWN, got {value!r}")


def _require_long(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if not 0 <= value <= _MAX_ID:
        raise InvalidInput(f"{name} must be within 0..{_MAX_ID}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class ScaleReport:
    """One AutoScaleEvent about a segment of a known stream (the stream is the request's key)."""

    segment_id: int
    direction: ScaleDirection
    timestamp: int
    num_of_splits: int
    silent: bool

    @staticmethod
    def build(
        segment_id: object, direction: object, timestamp: object, num_of_splits: object, silent: object
    ) -> ScaleReport:
        """A checked report; InvalidInput names the first bad field."""
        sid = _require_long("segmentId", segment_id)
        parsed = ScaleDirection.parse(direction)
        ts = _require_long("timestamp", timestamp)
        # The report's time plus its validity marks a segment cold: it must stay inside a bigint.
        check_timestamp("timestamp", ts)
        splits = _require_long("numOfSplits", num_of_splits)
        # Java reads numOfSplits as an int.
        if splits > 2**31 - 1:
            raise InvalidInput(f"numOfSplits must be at most {2**31 - 1}, got {splits}")
        if not isinstance(silent, bool):
            raise InvalidInput(f"silent must be a boolean, got {silent!r}")
        return ScaleReport(sid, parsed, ts, splits, silent)

    def to_payload(self) -> dict[str, Any]:
        return {
            "segment_id": self.segment_id,
            "direction": self.direction.value,
            "timestamp": self.timestamp,
            "num_of_splits": self.num_of_splits,
            "silent": self.silent,
        }

    @staticmethod
    def from_payload(payload: Mapping[str, Any]) -> ScaleReport:
        try:
            return ScaleReport.build(
                payload["segment_id"],
                payload["direction"],
                payload["timestamp"],
                payload["num_of_splits"],
                payload["silent"],
            )
        except KeyError as exc:
            raise InvalidInput(f"auto-scale request lacks {exc.args[0]!r}") from exc


@dataclass(frozen=True, slots=True)
class ReportResult:
    """What the intake did with a report: queued it, or why not (an expired report is not an error:
    the segment store's clock simply ran ahead of the queue)."""

    accepted: bool
    reason: str | None = None


ACCEPTED = ReportResult(True)
EXPIRED = ReportResult(False, "expired")


# endregion

# region the controller's AutoScaleTask


@dataclass(frozen=True, slots=True)
class AutoScaleDecision:
    """The scale a report asks for: seal these active segments, create these ranges."""

    to_seal: tuple[int, ...]
    new_ranges: tuple[KeyRange, ...]


def scales_automatically(policy: ScalingPolicy) -> bool:
    """FIXED streams ignore every report, UP and DOWN alike (no cold mark either)."""
    return policy.scale_type != ScaleType.FIXED_NUM_SEGMENTS


def cold_segments(markers: Mapping[int, int], now: int) -> frozenset[int]:
    """The segments whose cold marker (segment -> until) is still in the future."""
    return frozenset(segment for segment, until in markers.items() if is_cold(until, now))


def scale_up(
    segment: int, num_of_splits: int, policy: ScalingPolicy, active: EpochRecord
) -> AutoScaleDecision | None:
    """Split `segment` into equal pieces; None when it is not active any more (Java's submitScale
    would fail its precondition and the event be dropped, so the outcome is the same)."""
    current = next((s for s in active.segments if s.id == segment), None)
    if current is None:
        return None
    # The split replaces one segment by its pieces: the epoch after it stays within the bound
    # every epoch keeps, so a full epoch is not split at all.
    room = MAX_SEGMENTS_PER_EPOCH - (len(active.segments) - 1)
    if room < 2:
        return None
    pieces = split_ranges(current, min(num_of_splits, room), min(policy.scale_factor, room))
    return AutoScaleDecision((segment,), tuple(pieces))


def scale_down(
    segment: int, policy: ScalingPolicy, active: EpochRecord, cold: AbstractSet[int]
) -> AutoScaleDecision | None:
    """Merge `segment` with its cold immediate neighbours; None = the cold mark is all there is.
    `cold` must already include the mark this report has just written."""
    chosen = merge_candidates(segment, active, cold, policy.min_num_segments)
    if not chosen:
        return None
    return AutoScaleDecision(tuple(s.id for s in chosen), (merged_range(chosen),))


def decide(
    report: ScaleReport, policy: ScalingPolicy, active: EpochRecord, cold: AbstractSet[int]
) -> AutoScaleDecision | None:
    if not scales_automatically(policy):
        return None
    if report.direction is ScaleDirection.UP:
        return scale_up(report.segment_id, report.num_of_splits, policy, active)
    return scale_down(report.segment_id, policy, active, cold)


def decision_check(decision: AutoScaleDecision, active: EpochRecord, policy: ScalingPolicy) -> ScaleCheck:
    """submitScale's checks for an auto-scale: anything but OK means the report is dropped, never retried
    (PRECONDITION_FAILED is Java's silent drop; INVALID_RANGES only for a segment too narrow to split)."""
    return validate_scale(active, decision.to_seal, decision.new_ranges, policy.min_num_segments)


# endregion

# region the segment store's side (AutoScaleProcessor): traffic rates, when to report, cooldown and mute

TICK_MS = 5_000
COOLDOWN_MS = 10 * 60 * 1000
MUTE_MS = 10 * 60 * 1000
REPORTING_INTERVAL_MS = 2 * 60 * 1000
IDLE_EXPIRY_MS = 20 * 60 * 1000
_MINUTE_MS = 60 * 1000


@dataclass(frozen=True, slots=True)
class TrafficWindows:
    """The segment store's fixed durations: the 5-second tick, the windows of the 2/5/10/20-minute
    averages (each also the age a segment must reach before its average is trusted) and the
    2-minute reporting interval. Pravega fixes them; `scaled` shrinks them all alike for tests,
    which keeps every rule as it is (an average's weight per tick depends only on tick / window,
    and rates stay per real second)."""

    tick_ms: int = TICK_MS
    two_minute_ms: int = 2 * _MINUTE_MS
    five_minute_ms: int = 5 * _MINUTE_MS
    ten_minute_ms: int = 10 * _MINUTE_MS
    twenty_minute_ms: int = 20 * _MINUTE_MS
    reporting_interval_ms: int = REPORTING_INTERVAL_MS

    def scaled(self, factor: float) -> TrafficWindows:
        if not 0 < factor <= 1:
            raise InvalidInput(f"the auto-scaler's time scale must be within (0, 1], got {factor}")
        return TrafficWindows(*(max(1, round(getattr(self, f.name) * factor)) for f in fields(self)))

    @property
    def windows_ms(self) -> tuple[int, int, int, int]:
        return (self.two_minute_ms, self.five_minute_ms, self.ten_minute_ms, self.twenty_minute_ms)

    @property
    def alphas(self) -> tuple[float, ...]:
        # One tick's weight in an exponentially weighted average over each window (Pravega's
        # M*_ALPHA, computed in the same order of operations so the defaults match it exactly).
        tick_s = self.tick_ms / 1000
        return tuple(1 - math.exp(-tick_s / 60 / (window / _MINUTE_MS)) for window in self.windows_ms)


PRAVEGA_WINDOWS = TrafficWindows()


@dataclass(frozen=True, slots=True)
class TrafficRates:
    """Per-second rates in the policy's unit: events, or KiB for BY_RATE_IN_KBYTES_PER_SEC."""

    two_minute: float
    five_minute: float
    ten_minute: float
    twenty_minute: float


class SegmentAggregates:
    """One segment's traffic averages, updated in ticks exactly as Pravega's SegmentAggregates:
    silent ticks decay the averages with a zero count, the first non-zero tick seeds them.
    Mutable on purpose: it is a running average, owned by one segment store's monitor."""

    def __init__(
        self, scale_type: ScaleType, target_rate: int, now: int, windows: TrafficWindows = PRAVEGA_WINDOWS
    ) -> None:
        if scale_type == ScaleType.FIXED_NUM_SEGMENTS or target_rate <= 0:
            raise InvalidInput("traffic is only aggregated for rate-based policies with a positive target")
        self.scale_type = scale_type
        self.target_rate = target_rate
        self.start_time = now
        self.windows = windows
        self._alphas = windows.alphas
        self._last_tick = now
        self._last_reported = now
        self._count = 0
        self._rates = [0.0, 0.0, 0.0, 0.0]

    def update(self, events: int, size: int, now: int) -> None:
        self._count += size if self.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC else events
        tick = self.windows.tick_ms
        age = now - self._last_tick
        if age <= tick:
            return
        self._last_tick = now
        count, self._count = self._count, 0
        iterations = age // tick
        for _ in range(iterations - 1):
            self._decay(0, tick / 1000)
        self._decay(count, (age - (iterations - 1) * tick) / 1000)

    def update_transaction(self, events: int, size: int, created_at: int, now: int) -> None:
        """A merged transaction (Pravega's updateTx): one that lived longer than a tick counts
        only a tick's share of its traffic, as if it had been spread over its life."""
        lifetime = now - created_at
        tick = self.windows.tick_ms
        if lifetime < tick:
            self.update(events, size, now)
        else:
            self.update(events * tick // lifetime, size * tick // lifetime, now)

    def _decay(self, count: int, seconds: float) -> None:
        instant = count / seconds
        self._rates = [
            instant if rate == 0 else rate + alpha * (instant - rate)
            for rate, alpha in zip(self._rates, self._alphas, strict=True)
        ]

    @property
    def rates(self) -> TrafficRates:
        unit = 1024.0 if self.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC else 1.0
        two, five, ten, twenty = (rate / unit for rate in self._rates)
        return TrafficRates(two, five, ten, twenty)

    def report_due(self, now: int, interval_ms: int | None = None) -> bool:
        """True at most once per interval (the windows' reporting interval unless given): the
        segment store looks at a segment's rates only that often, on its append path."""
        interval = self.windows.reporting_interval_ms if interval_ms is None else interval_ms
        if now - self._last_reported > interval:
            self._last_reported = now
            return True
        return False


@dataclass(frozen=True, slots=True)
class TrafficVerdict:
    direction: ScaleDirection
    num_of_splits: int


def traffic_verdict(
    rates: TrafficRates,
    target_rate: int,
    start_time: int,
    now: int,
    cooldown_ms: int = COOLDOWN_MS,
    windows: TrafficWindows = PRAVEGA_WINDOWS,
) -> TrafficVerdict | None:
    """Pravega's AutoScaleProcessor#report: UP when a short average is far above the target (or a
    long one above it), DOWN when every average is below it; nothing during the cooldown."""
    age = now - start_time
    if age <= cooldown_ms:
        return None
    two, five, ten, twenty = windows.windows_ms
    if (
        (rates.two_minute > 5.0 * target_rate and age > two)
        or (rates.five_minute > 2.0 * target_rate and age > five)
        or (rates.ten_minute > target_rate and age > ten)
    ):
        peak = max(rates.two_minute, rates.five_minute, rates.ten_minute)
        return TrafficVerdict(ScaleDirection.UP, max(2, int(peak / target_rate)))
    if (
        rates.two_minute < target_rate
        and rates.five_minute < target_rate
        and rates.ten_minute < target_rate
        and rates.twenty_minute < target_rate / 2.0
        and age > twenty
    ):
        return TrafficVerdict(ScaleDirection.DOWN, 0)
    return None


@dataclass(frozen=True, slots=True)
class MuteRecord:
    """When a segment last reported UP and DOWN. A report is sent only after the mute period;
    a new segment starts muted (Pravega's notifyCreated)."""

    last_up: int
    last_down: int

    @staticmethod
    def created(now: int) -> MuteRecord:
        return MuteRecord(now, now)

    def allows(self, direction: ScaleDirection, now: int, mute_ms: int = MUTE_MS) -> bool:
        last = self.last_up if direction is ScaleDirection.UP else self.last_down
        return now - last > mute_ms

    def after_report(self, direction: ScaleDirection, timestamp: int, silent: bool) -> MuteRecord:
        if direction is ScaleDirection.UP:
            return MuteRecord(timestamp, timestamp)  # an UP mutes both directions
        if silent:
            return self
        # Java's quirk, kept: a DOWN writes (0, ts), which also lifts an UP mute.
        return MuteRecord(0, timestamp)


def parse_stream_segment_name(name: str) -> tuple[str, str, int] | None:
    """A stream segment's name -> (scope, stream, segment id); None for any other segment
    (transaction, table or malformed), which never takes part in auto-scaling. The grammar is
    segment_names.parse_stream_segment_name's."""
    parsed = parse_segment_name(name)
    if parsed is None:
        return None
    scope, stream, number, epoch = parsed
    return scope, stream, make_segment_id(number, epoch)


# endregion
