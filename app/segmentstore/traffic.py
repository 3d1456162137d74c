"""Simulated segment-store traffic and the auto-scale reports it triggers (Pravega's segment-store
side of auto-scaling, AutoScaleProcessor), for the embedded segment store, tests and demonstrations.

TrafficSimulator owns, per rate-based stream segment, the traffic averages and the mute record,
and sends reports to a ScaleReportSink. Invariants: nothing is reported for a segment whose policy
is FIXED or that it was never told about; nothing during a segment's cooldown; at most one report
per direction per mute period. Everything is judged at the injected clock's time. It is one
process's view (Pravega's segment stores each judge their own segments), so it keeps no state in
the database; a lost report is simply made again by later traffic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.domain.autoscale import (
    COOLDOWN_MS,
    IDLE_EXPIRY_MS,
    MUTE_MS,
    REPORTING_INTERVAL_MS,
    MuteRecord,
    ReportResult,
    ScaleDirection,
    SegmentAggregates,
    TrafficVerdict,
    parse_stream_segment_name,
    traffic_verdict,
)
from app.domain.errors import DomainError
from app.domain.records import ScaleType
from app.ports import Clock, ScaleReportSink, SegmentInfo, SegmentStore

log = logging.getLogger("pgcontroller.traffic")


@dataclass(frozen=True, slots=True)
class TrafficSettings:
    """Pravega's AutoScalerConfig defaults; tests shorten nothing, they move the clock."""

    cooldown_ms: int = COOLDOWN_MS
    mute_ms: int = MUTE_MS
    reporting_interval_ms: int = REPORTING_INTERVAL_MS
    idle_expiry_ms: int = IDLE_EXPIRY_MS


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
    # None once the segment stayed idle past the expiry (Pravega evicts its cache entry then).
    mute: MuteRecord | None
    last_access: int
    pending: list[tuple[TrafficVerdict, int]] = field(default_factory=list)


class TrafficSimulator:
    def __init__(self, sink: ScaleReportSink, clock: Clock, settings: TrafficSettings | None = None) -> None:
        self._sink = sink
        self._clock = clock
        self._settings = settings or TrafficSettings()
        self._segments: dict[str, _Segment] = {}

    def track(
        self, segment_name: str, scale_type: ScaleType, target_rate: int, *, created: bool = True
    ) -> bool:
        """Starts (or, on a policy change, restarts) the averages of a stream segment; a FIXED
        policy stops tracking it. `created` mutes a new segment as Pravega's notifyCreated does; a
        policy update keeps the mute it had. False when the segment is not tracked afterwards."""
        parsed = parse_stream_segment_name(segment_name)
        if parsed is None or scale_type == ScaleType.FIXED_NUM_SEGMENTS or target_rate <= 0:
            self._segments.pop(segment_name, None)
            return False
        now = self._clock.now_ms()
        previous = self._segments.get(segment_name)
        mute = MuteRecord.created(now) if created or previous is None else previous.mute
        scope, stream, segment_id = parsed
        self._segments[segment_name] = _Segment(
            scope, stream, segment_id, SegmentAggregates(scale_type, target_rate, now), mute, now
        )
        return True

    def forget(self, segment_name: str) -> None:
        """A sealed or deleted segment reports nothing more."""
        self._segments.pop(segment_name, None)

    def tracked(self) -> list[str]:
        return sorted(self._segments)

    def is_tracked(self, segment_name: str) -> bool:
        return segment_name in self._segments

    def record(self, segment_name: str, events: int, size: int) -> bool:
        """Traffic written to a segment; False for one that is not tracked (ignored)."""
        segment = self._segments.get(segment_name)
        if segment is None:
            return False
        now = self._clock.now_ms()
        segment.aggregates.update(events, size, now)
        if segment.mute is not None:
            segment.last_access = now
        if segment.aggregates.report_due(now, self._settings.reporting_interval_ms):
            verdict = traffic_verdict(
                segment.aggregates.rates,
                segment.aggregates.target_rate,
                segment.aggregates.start_time,
                now,
                self._settings.cooldown_ms,
            )
            if verdict is not None:
                segment.pending.append((verdict, now))
        return True

    async def run_once(self) -> list[SentReport]:
        """Sends what traffic has triggered since the last pass, and silent DOWN reports for
        segments idle past the expiry; returns what was handed to the sink."""
        sent: list[SentReport] = []
        now = self._clock.now_ms()
        for name, segment in list(self._segments.items()):
            pending, segment.pending = segment.pending, []
            for verdict, at in pending:
                mute = segment.mute or MuteRecord(0, 0)
                if mute.allows(verdict.direction, at, self._settings.mute_ms):
                    sent.append(
                        await self._send(name, segment, verdict.direction, at, verdict.num_of_splits, False)
                    )
            if segment.mute is not None and now - segment.last_access > self._settings.idle_expiry_ms:
                segment.mute = None
                sent.append(await self._send(name, segment, ScaleDirection.DOWN, now, 0, True))
        return sent

    async def _send(
        self, name: str, segment: _Segment, direction: ScaleDirection, at: int, splits: int, silent: bool
    ) -> SentReport:
        try:
            result: ReportResult | None = await self._sink.report(
                segment.scope, segment.stream, segment.segment_id, direction, at, splits, silent
            )
        except DomainError as exc:
            log.warning("%s report for %s not delivered: %s", direction.value, name, exc)
            result = None
        else:
            if not silent:
                segment.mute = (segment.mute or MuteRecord(0, 0)).after_report(direction, at, silent)
                segment.last_access = at
        return SentReport(name, direction, at, splits, silent, result)

    async def run(self, period_s: float) -> None:
        """Runs until cancelled; a failing pass is logged and the next one runs on time."""
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("traffic report pass failed")
            await asyncio.sleep(period_s)


class AppendingSegmentStore(SegmentStore, Protocol):
    """A SegmentStore that also takes simulated writes (the embedded one does)."""

    async def append(self, name: str, size: int) -> int: ...


class TrafficRecordingSegmentStore:
    """Wraps a segment store so the simulator follows it: segments are tracked with the policy
    they are created or updated with, forgotten when sealed or deleted, and every `append` counts
    as one event of `size` bytes. Every call is passed through unchanged."""

    def __init__(self, inner: AppendingSegmentStore, simulator: TrafficSimulator) -> None:
        self._inner = inner
        self._simulator = simulator

    async def create_segment(
        self, name: str, scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_segment(name, scale_type, target_rate, rollover_size_bytes)
        # A repeated create (a workflow re-run) must not restart the averages or the cooldown.
        if not self._simulator.is_tracked(name):
            self._simulator.track(name, scale_type, target_rate)

    async def create_segments(
        self, names: Sequence[str], scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_segments(names, scale_type, target_rate, rollover_size_bytes)
        for name in names:
            if not self._simulator.is_tracked(name):
                self._simulator.track(name, scale_type, target_rate)

    async def seal_segment(self, name: str) -> int:
        length = await self._inner.seal_segment(name)
        self._simulator.forget(name)
        return length

    async def truncate_segment(self, name: str, offset: int) -> None:
        await self._inner.truncate_segment(name, offset)

    async def delete_segment(self, name: str) -> None:
        await self._inner.delete_segment(name)
        self._simulator.forget(name)

    async def update_policy(self, name: str, scale_type: ScaleType, target_rate: int) -> None:
        await self._inner.update_policy(name, scale_type, target_rate)
        self._simulator.track(name, scale_type, target_rate, created=False)

    async def get_segment_info(self, name: str) -> SegmentInfo:
        return await self._inner.get_segment_info(name)

    async def create_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_transaction_segment(segment_name, txn_high, txn_low, rollover_size_bytes)

    async def create_transaction_segments(
        self, segment_names: Sequence[str], txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        await self._inner.create_transaction_segments(segment_names, txn_high, txn_low, rollover_size_bytes)

    async def merge_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, *, txn_parent: str | None = None
    ) -> int:
        return await self._inner.merge_transaction_segment(
            segment_name, txn_high, txn_low, txn_parent=txn_parent
        )

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        return await self._inner.merge_transaction_segments(segment_name, txns, txn_parent=txn_parent)

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None:
        await self._inner.abort_transaction_segment(segment_name, txn_high, txn_low)

    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._inner.create_table_segment(name, key_length, rollover_size_bytes)

    async def delete_table_segment(self, name: str, must_be_empty: bool) -> None:
        await self._inner.delete_table_segment(name, must_be_empty)

    async def append(self, name: str, size: int) -> int:
        length = await self._inner.append(name, size)
        self._simulator.record(name, 1, size)
        return length
