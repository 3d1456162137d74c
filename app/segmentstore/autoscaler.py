"""The segment store's side of auto-scaling (Pravega's SegmentStatsRecorder and AutoScaleProcessor):
per stream segment, the traffic averages of its scale policy and its mute record, and the scale
reports they trigger, handed to a ScaleReportSink.

Invariants: nothing is reported for a segment whose policy is not rate-based, nor during its
cooldown; at most one report per direction per mute period, and a report mutes only once the sink
took it; a segment left idle past the cache expiry is dropped, with a silent DOWN if it was in the
processor's cache (created here, or reported on). Every judgement uses the injected clock's time.
It is one process's view (each store judges the segments it serves), kept in memory only: a lost
report is simply made again by later traffic, as a restarted Pravega store would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from app.domain.autoscale import (
    COOLDOWN_MS,
    IDLE_EXPIRY_MS,
    MUTE_MS,
    PRAVEGA_WINDOWS,
    MuteRecord,
    ReportResult,
    ScaleDirection,
    SegmentAggregates,
    TrafficVerdict,
    TrafficWindows,
    parse_stream_segment_name,
    traffic_verdict,
)
from app.domain.records import ScaleType
from app.ports import Clock, ScaleReportSink
from app.waiting import wait_event

log = logging.getLogger("pgcontroller.autoscaler")

# Pravega's autoScale.cache.cleanUp.interval.seconds: how often idle segments are looked for.
CACHE_CLEANUP_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class AutoScalerConfig:
    """Pravega's AutoScalerConfig (cooldown, mute, cache expiry and clean-up) with its defaults,
    and the windows Pravega fixes (shortened only by tests, through TrafficWindows.scaled)."""

    cooldown_ms: int = COOLDOWN_MS
    mute_ms: int = MUTE_MS
    cache_expiry_ms: int = IDLE_EXPIRY_MS
    cache_cleanup_ms: int = CACHE_CLEANUP_MS
    windows: TrafficWindows = PRAVEGA_WINDOWS


@dataclass(frozen=True, slots=True)
class SentReport:
    """A report handed to the sink, with its answer (None: the sink failed, nothing was muted)."""

    segment_name: str
    direction: ScaleDirection
    timestamp: int
    num_of_splits: int
    silent: bool
    result: ReportResult | None


@dataclass
class _Segment:
    scope: str
    stream: str
    segment_id: int
    aggregates: SegmentAggregates
    # None while the segment is not in the processor's cache: loaded after a restart or a
    # container move (never created here), or idle past the expiry.
    mute: MuteRecord | None
    last_access: int
    pending: list[tuple[TrafficVerdict, int]] = field(default_factory=list)


def rate_policy(scale_type: int, target_rate: int) -> ScaleType | None:
    """The policy's ScaleType when it scales by rate (the wire's scale type byte matches the
    enum: 1 KB/s, 2 events/s), None for NoScaling, a non-positive target or an unknown type."""
    if target_rate <= 0 or scale_type not in (
        ScaleType.BY_RATE_IN_KBYTES_PER_SEC,
        ScaleType.BY_RATE_IN_EVENTS_PER_SEC,
    ):
        return None
    return ScaleType(scale_type)


class AutoScaleMonitor:
    def __init__(self, sink: ScaleReportSink, clock: Clock, config: AutoScalerConfig | None = None) -> None:
        self._sink = sink
        self._clock = clock
        self.config = config or AutoScalerConfig()
        self._segments: dict[str, _Segment] = {}
        # Stream segments known not to scale (FIXED policy, `_MARK` segments), by last access, so
        # that their appends do not ask storage for the policy again.
        self._static: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- what the store tells it --------------------------------------------------------------

    def created(self, segment_name: str, scale_type: int, target_rate: int) -> bool:
        """A stream segment created here: tracked, and muted as new (Pravega's notifyCreated).
        False when it does not scale by rate (a transaction or table segment never does)."""
        return self._start(segment_name, scale_type, target_rate, muted=True)

    def loaded(self, segment_name: str, scale_type: int, target_rate: int) -> bool:
        """The policy of a segment this store did not create, read from storage on its first
        append: tracked from now on, not muted. A segment tracked meanwhile is left alone."""
        if segment_name in self._segments:
            return True
        return self._start(segment_name, scale_type, target_rate, muted=False)

    def policy_updated(self, segment_name: str, scale_type: int, target_rate: int) -> bool:
        """UpdateSegmentPolicy: a new scale type restarts the averages, a new target under the same
        type keeps them; the mute record stays either way."""
        segment = self._segments.get(segment_name)
        if segment is None:
            return self.loaded(segment_name, scale_type, target_rate)
        policy = rate_policy(scale_type, target_rate)
        if policy is None:
            self.forget(segment_name)
            self._static[segment_name] = self._clock.now_ms()
            return False
        if policy == segment.aggregates.scale_type:
            segment.aggregates.target_rate = target_rate
        else:
            segment.aggregates = SegmentAggregates(
                policy, target_rate, self._clock.now_ms(), self.config.windows
            )
        return True

    def forget(self, segment_name: str) -> None:
        """A sealed or deleted segment reports nothing more."""
        self._segments.pop(segment_name, None)
        self._static.pop(segment_name, None)

    def wants_policy(self, segment_name: str) -> bool:
        """True for a stream segment whose policy this monitor does not know yet."""
        if segment_name in self._segments or segment_name in self._static:
            return False
        return parse_stream_segment_name(segment_name) is not None

    def tracked(self) -> list[str]:
        return sorted(self._segments)

    def is_tracked(self, segment_name: str) -> bool:
        return segment_name in self._segments

    def rates_of(self, segment_name: str) -> SegmentAggregates | None:
        segment = self._segments.get(segment_name)
        return None if segment is None else segment.aggregates

    # --- traffic ------------------------------------------------------------------------------

    def record(self, segment_name: str, events: int, size: int) -> bool:
        """Appended traffic; False for a segment that is not tracked (ignored)."""
        segment = self._segments.get(segment_name)
        if segment is None:
            self._touch_static(segment_name)
            return False
        now = self._clock.now_ms()
        segment.aggregates.update(events, size, now)
        self._judge(segment, now)
        return True

    def record_transaction(self, segment_name: str, events: int, size: int, created_at: int) -> bool:
        """A transaction (or transient segment) merged into `segment_name`: its traffic counts
        spread over its life (Pravega's merge stats)."""
        segment = self._segments.get(segment_name)
        if segment is None:
            self._touch_static(segment_name)
            return False
        now = self._clock.now_ms()
        segment.aggregates.update_transaction(events, size, created_at, now)
        self._judge(segment, now)
        return True

    def _touch_static(self, segment_name: str) -> None:
        if segment_name in self._static:
            self._static[segment_name] = self._clock.now_ms()

    def _start(self, segment_name: str, scale_type: int, target_rate: int, *, muted: bool) -> bool:
        parsed = parse_stream_segment_name(segment_name)
        if parsed is None:
            return False
        now = self._clock.now_ms()
        policy = rate_policy(scale_type, target_rate)
        if policy is None:
            self._segments.pop(segment_name, None)
            self._static[segment_name] = now
            return False
        self._static.pop(segment_name, None)
        scope, stream, segment_id = parsed
        aggregates = SegmentAggregates(policy, target_rate, now, self.config.windows)
        mute = MuteRecord.created(now) if muted else None
        self._segments[segment_name] = _Segment(scope, stream, segment_id, aggregates, mute, now)
        return True

    def _judge(self, segment: _Segment, now: int) -> None:
        segment.last_access = now
        if not segment.aggregates.report_due(now):
            return
        verdict = traffic_verdict(
            segment.aggregates.rates,
            segment.aggregates.target_rate,
            segment.aggregates.start_time,
            now,
            self.config.cooldown_ms,
            self.config.windows,
        )
        if verdict is not None:
            segment.pending.append((verdict, now))
            self._wake.set()

    # --- reports ------------------------------------------------------------------------------

    async def run_once(self) -> list[SentReport]:
        """Sends what traffic has triggered since the last pass, and drops the segments idle past
        the expiry (a silent DOWN for those in the processor's cache); returns what was sent."""
        sent: list[SentReport] = []
        now = self._clock.now_ms()
        for name, segment in list(self._segments.items()):
            pending, segment.pending = segment.pending, []
            for verdict, at in pending:
                mute = segment.mute or MuteRecord(0, 0)
                if mute.allows(verdict.direction, at, self.config.mute_ms):
                    sent.append(await self._send(name, segment, verdict.direction, at, verdict.num_of_splits))
            if (
                now - segment.last_access > self.config.cache_expiry_ms
                and self._segments.get(name) is segment
            ):
                del self._segments[name]
                if segment.mute is not None:
                    sent.append(await self._send(name, segment, ScaleDirection.DOWN, now, 0, silent=True))
        for name, last in list(self._static.items()):
            if now - last > self.config.cache_expiry_ms:
                del self._static[name]
        return sent

    async def _send(
        self,
        name: str,
        segment: _Segment,
        direction: ScaleDirection,
        at: int,
        splits: int,
        *,
        silent: bool = False,
    ) -> SentReport:
        try:
            result: ReportResult | None = await self._sink.report(
                segment.scope, segment.stream, segment.segment_id, direction, at, splits, silent
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The stream may be gone, or the database unreachable: the report is lost, nothing is
            # muted, and traffic that still calls for it reports again.
            log.warning("%s report for %s not delivered: %s", direction.value, name, exc)
            result = None
        else:
            log.info("%s report for %s sent (splits %d, silent %s)", direction.value, name, splits, silent)
            if not silent:
                segment.mute = (segment.mute or MuteRecord(0, 0)).after_report(direction, at, silent)
        return SentReport(name, direction, at, splits, silent, result)

    async def run(self) -> None:
        """Sends reports as soon as traffic triggers them and looks for idle segments every
        clean-up interval, until cancelled; a failing pass is logged and the next one runs."""
        while True:
            await wait_event(self._wake, self.config.cache_cleanup_ms / 1000)
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("auto-scale report pass failed")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name="autoscale-reports")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
