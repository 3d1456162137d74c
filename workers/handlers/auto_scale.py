"""AUTO_SCALE requests: Pravega's AutoScaleTask and its ScaleOperationTask(manual=false) in one,
run by the stream's serial request processor.

One attempt: settle any epoch transition already pending (ours from before a crash, or a manual
scale whose request is queued behind this one: it runs first, as Java's postponed event would
wait for it); drop a report that has expired, targets a FIXED or sealed stream, or asks for a
scale that fails its preconditions (segment gone, minimum segments); a DOWN report marks its
segment cold; a report that still scales moves the stream to SCALING, is judged again on the
epoch as it is then, writes its transition and runs it, and puts the stream back to ACTIVE.

Crash-safe: a re-run first completes a transition it finds pending, then judges the report on
the new epoch, where the segments it scaled are no longer active, so it never scales twice. A
state this handler cannot leave yet raises OperationNotAllowed and the runner postpones it.
"""

from __future__ import annotations

import contextlib
import logging

from app.domain.autoscale import (
    AutoScaleDecision,
    ScaleDirection,
    ScaleReport,
    cold_segments,
    decide,
    decision_check,
    scales_automatically,
)
from app.domain.errors import InvalidInput, WriteConflict
from app.domain.records import EpochRecord, ScalingPolicy, StreamState
from app.domain.requests import Request
from app.domain.scale_rules import (
    ScaleCheck,
    auto_scale_event_expired,
    cold_marker_until,
    compute_epoch_transition,
)
from app.ports import AutoScaleStore
from workers.handlers.common import WorkflowDeps, drop_transition, move_state, restore_active, retry_conflicts
from workers.handlers.scale_steps import run_pending_scale
from workers.runner import MarkStarted

log = logging.getLogger("pgcontroller.autoscale")

_CLOSED = (StreamState.SEALING, StreamState.SEALED)


class AutoScaleHandler:
    def __init__(self, deps: WorkflowDeps, cold_markers: AutoScaleStore | None) -> None:
        # None only where auto-scaling is not wired: UP reports still scale, DOWN ones (which need
        # durable cold markers) are dropped with a warning.
        self._deps = deps
        self._cold = cold_markers

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        try:
            report = ScaleReport.from_payload(request.payload)
        except InvalidInput as exc:
            # The intake validates; a row it did not write must not block the stream for ever.
            log.warning(
                "auto-scale request %d for %s/%s is malformed, dropped: %s", request.id, scope, name, exc
            )
            return
        streams = self._deps.streams
        state = (await streams.get_state(scope, name)).value
        if state in _CLOSED:
            # Its seal request is queued behind this one; waiting here would block it for ever.
            log.info("auto-scale of %s/%s dropped: the stream is %s", scope, name, state.value)
            return
        await self._settle(scope, name, state, mark_started)

        now = self._deps.clock.now_ms()
        if auto_scale_event_expired(report.timestamp, now):
            log.info("auto-scale report for %s/%s segment %d expired", scope, name, report.segment_id)
            return
        policy = (await streams.get_config(scope, name)).value.scaling
        if not scales_automatically(policy):
            return
        if report.direction is ScaleDirection.DOWN and not await self._mark_cold(scope, name, report):
            return
        if await self._judge(scope, name, report, policy, now) is None:
            return

        await move_state(streams, scope, name, StreamState.SCALING)
        await mark_started()
        # Until SCALING was reached a commit could still roll the epoch: judge on the epoch as it is.
        judged = await self._judge(scope, name, report, policy, now)
        if judged is not None:
            await self._scale(scope, name, *judged, now)
        await move_state(streams, scope, name, StreamState.ACTIVE)

    async def rollback(self, request: Request) -> None:
        """For a parked report: the transition it had yet to run is dropped, SCALING -> ACTIVE."""
        streams = self._deps.streams
        if (await streams.get_state(request.scope, request.stream)).value == StreamState.SCALING:
            await drop_transition(streams, request.scope, request.stream)
        await restore_active(streams, request.scope, request.stream, StreamState.SCALING)

    async def _settle(self, scope: str, name: str, state: StreamState, mark_started: MarkStarted) -> None:
        streams = self._deps.streams
        pending = (await streams.get_epoch_transition(scope, name)).value
        if pending is None:
            if state == StreamState.SCALING:
                # Left by a scale that crashed after completing (or before writing its transition).
                await move_state(streams, scope, name, StreamState.ACTIVE)
            return
        await move_state(streams, scope, name, StreamState.SCALING)
        await mark_started()
        # Manual semantics: a manual scale's transition survives a rolling transaction's epoch copy;
        # for one of ours from before a crash, running it on the copy is harmless.
        await run_pending_scale(self._deps, scope, name, manual=True)
        await move_state(streams, scope, name, StreamState.ACTIVE)

    async def _mark_cold(self, scope: str, name: str, report: ScaleReport) -> bool:
        """Marks the segment cold; False when the report can do nothing more (no marker store, or
        the segment is not active any more: a sealed segment's mark would never be read)."""
        if self._cold is None:
            log.warning("DOWN report for %s/%s dropped: cold markers are not wired", scope, name)
            return False
        cold = self._cold
        _state, active = await self._deps.streams.get_active_epoch(scope, name)
        if not active.contains(report.segment_id):
            return False
        until = cold_marker_until(report.timestamp, report.silent)

        async def step() -> None:
            current = (await cold.cold_markers(scope, name)).get(report.segment_id)
            if current is None or current.value != until:
                version = None if current is None else current.version
                await cold.put_cold_marker(scope, name, report.segment_id, until, version)

        await retry_conflicts(step, f"cold marker of {scope}/{name} segment {report.segment_id}")
        return True

    async def _judge(
        self, scope: str, name: str, report: ScaleReport, policy: ScalingPolicy, now: int
    ) -> tuple[EpochRecord, AutoScaleDecision] | None:
        """The scale the report asks for on the active epoch, or None (nothing to do, or a
        precondition fails: Java drops such a scale silently, it is never retried)."""
        _state, active = await self._deps.streams.get_active_epoch(scope, name)
        cold: frozenset[int] = frozenset()
        if report.direction is ScaleDirection.DOWN:
            cold = await self._cold_set(scope, name, active, now)
        decision = decide(report, policy, active, cold)
        if decision is None:
            return None
        check = decision_check(decision, active, policy)
        if check is not ScaleCheck.OK:
            log.info(
                "auto-scale of %s/%s sealing %s dropped: %s", scope, name, list(decision.to_seal), check.value
            )
            return None
        return active, decision

    async def _cold_set(self, scope: str, name: str, active: EpochRecord, now: int) -> frozenset[int]:
        """The active segments that are cold now; markers of segments no longer active are removed
        on the way (any scale may have sealed them, manual ones included)."""
        assert self._cold is not None
        markers = await self._cold.cold_markers(scope, name)
        stale = {segment: v.version for segment, v in markers.items() if not active.contains(segment)}
        if stale:
            # A marker rewritten meanwhile stays; the next pass removes it.
            with contextlib.suppress(WriteConflict):
                await self._cold.delete_cold_markers(scope, name, stale)
        return cold_segments({s: v.value for s, v in markers.items() if s not in stale}, now)

    async def _scale(
        self, scope: str, name: str, active: EpochRecord, decision: AutoScaleDecision, now: int
    ) -> None:
        streams = self._deps.streams
        etr_v = await streams.get_epoch_transition(scope, name)
        if etr_v.value is not None:
            # A manual scale was submitted since we settled; the retry settles it first.
            raise WriteConflict(f"another scale of {scope}/{name} was submitted meanwhile")
        etr = compute_epoch_transition(active, decision.to_seal, decision.new_ranges, now)
        await streams.set_epoch_transition(scope, name, etr, etr_v.version)
        log.info(
            "auto-scale of %s/%s: sealing %s, creating %s",
            scope,
            name,
            list(decision.to_seal),
            [sid for sid, _start, _end in etr.new_segments],
        )
        await run_pending_scale(self._deps, scope, name, manual=False)
        if self._cold is not None:
            _state, now_active = await streams.get_active_epoch(scope, name)
            await self._cold_set(scope, name, now_active, now)
