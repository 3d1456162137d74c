"""Auto-scaling end to end over a real PostgreSQL: reports go through the intake into the request
queue and are applied by the real request workers (dispatcher, keyed queues, runner, handlers),
and the segment store's auto-scaler, fed simulated traffic, drives a real split with a fake clock.

The workers here are wired by the test (the same classes app.main wires) so that AUTO_SCALE
requests have their cold-marker store; `running_controller(..., workers=False)` provides every
other service without its own background loops, so nothing else consumes the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from app.domain.autoscale import IDLE_EXPIRY_MS, MUTE_MS, ScaleDirection, ScaleReport
from app.domain.cluster import MAX_BUCKETS
from app.domain.ids import qualified_segment_name
from app.domain.ids import segment_id as seg
from app.domain.records import EpochRecord, ScaleType, ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import NewRequest, Request, RequestKind
from app.domain.scale_rules import COLD_FOREVER
from app.ports import SegmentStoreLocator
from app.segmentstore.autoscaler import AutoScaleMonitor
from app.segmentstore.client import WireSegmentStore
from app.services.autoscale import AutoScaleIntake
from app.services.scaling import CheckScaleOutcome
from app.services.stream_updates import UpdateOutcome
from app.store.autoscale import PgAutoScaleStore
from app.testing.clock import ManualClock
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from app.testing.traffic import AppendingSegmentStore, TrafficRecordingSegmentStore
from workers.dispatcher import RequestDispatcher
from workers.handlers import stream_request_handlers
from workers.handlers.auto_scale import AutoScaleHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner

SC, ST = "auto", "s"
MINUTE = 60_000
WAIT_S = 20.0
EVERY_BUCKET = frozenset(range(MAX_BUCKETS))


@dataclass
class Harness:
    s: Services
    store: PgAutoScaleStore
    intake: AutoScaleIntake
    segment_store: AppendingSegmentStore
    _tasks: list[tuple[RequestDispatcher, asyncio.Task[None]]] = field(default_factory=list)

    def deps(self) -> WorkflowDeps:
        s = self.s
        return WorkflowDeps(s.stream_store, s.scope_store, self.segment_store, s.clock, s.txn_store)

    def start_workers(self) -> None:
        handlers = stream_request_handlers(self.deps(), cold_markers=self.store)
        runner = RequestRunner(
            self.s.requests,
            handlers,
            self.s.clock,
            retry_first_s=0.02,
            postpone_first_s=0.02,
            max_failures=TEST_SETTINGS.request_max_failures,
        )
        dispatcher = RequestDispatcher(
            self.s.requests,
            runner,
            lambda: EVERY_BUCKET,
            ceiling=TEST_SETTINGS.request_concurrency,
            poll_s=0.05,
        )
        self._tasks.append((dispatcher, asyncio.create_task(dispatcher.run())))

    async def stop_workers(self) -> None:
        for dispatcher, task in self._tasks:
            await dispatcher.stop(5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def report(
        self, segment: int, direction: str, *, splits: int = 0, silent: bool = False, at: int | None = None
    ) -> bool:
        timestamp = self.s.clock.now_ms() if at is None else at
        result = await self.intake.report(SC, ST, segment, direction, timestamp, splits, silent)
        return result.accepted

    async def settled(self) -> None:
        """Every queued request has been processed (acknowledged or dropped)."""
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while await self.s.requests.list_requests(0, 10):
            if asyncio.get_running_loop().time() > deadline:
                left = await self.s.requests.list_requests(0, 10)
                raise AssertionError(f"requests still queued after {WAIT_S}s: {left}")
            await asyncio.sleep(0.02)

    async def state_reached(self, state: StreamState) -> None:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while (await self.s.stream_store.get_state(SC, ST)).value is not state:
            assert asyncio.get_running_loop().time() < deadline, f"the stream never reached {state}"
            await asyncio.sleep(0.01)

    async def active(self) -> EpochRecord:
        _state, active = await self.s.stream_store.get_active_epoch(SC, ST)
        return active

    async def active_ids(self) -> set[int]:
        return {s.id for s in (await self.active()).segments}

    async def assert_at_rest(self) -> None:
        assert (await self.s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE
        assert (await self.s.stream_store.get_epoch_transition(SC, ST)).value is None

    async def cold(self) -> dict[int, int]:
        return {s: v.value for s, v in (await self.store.cold_markers(SC, ST)).items()}


@pytest.fixture
async def h(db_url: str) -> AsyncIterator[Harness]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        store = PgAutoScaleStore(services.pool)
        harness = Harness(services, store, AutoScaleIntake(store, services.clock), services.segment_store)
        try:
            yield harness
        finally:
            await harness.stop_workers()


def by_events(min_segments: int, scale_factor: int = 2, target: int = 10) -> StreamConfig:
    return StreamConfig(
        ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, target, scale_factor, min_segments)
    )


async def make_stream(h: Harness, config: StreamConfig) -> None:
    await h.s.streams.create_stream(SC, ST, config)


async def sealed(h: Harness, segment: int) -> bool:
    return (await h.s.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))).sealed


# --- the controller's AutoScaleTask, Pravega's testScaleRequest --------------------------------


async def test_hot_report_splits_then_two_cold_neighbours_merge(h: Harness) -> None:
    await make_stream(h, by_events(3))
    h.start_workers()

    # numOfSplits 1 still makes two pieces.
    assert await h.report(2, "UP", splits=1)
    await h.settled()
    three, four = seg(3, 1), seg(4, 1)
    assert await h.active_ids() == {0, 1, three, four}
    start, end = 2.0 / 3.0, 1.0
    middle = start + (end - start) / 2
    ranges = {s.id: (s.key_start, s.key_end) for s in (await h.active()).segments}
    assert ranges[three] == (start, middle) and ranges[four] == (middle, end)
    assert await sealed(h, 2) and not await sealed(h, three)
    await h.assert_at_rest()

    # A first cold report only marks its segment, until its timestamp + 10 minutes.
    at = h.s.clock.now_ms()
    assert await h.report(four, "DOWN", at=at)
    await h.settled()
    assert await h.active_ids() == {0, 1, three, four}
    assert await h.cold() == {four: at + 10 * MINUTE}

    # A cold neighbour merges both back into [2/3, 1); the sealed segments' markers go with them.
    assert await h.report(three, "DOWN")
    await h.settled()
    five = seg(5, 2)
    assert await h.active_ids() == {0, 1, five}
    merged = next(s for s in (await h.active()).segments if s.id == five)
    assert (merged.key_start, merged.key_end) == (start, end)
    assert await sealed(h, three) and await sealed(h, four)
    assert await h.cold() == {}
    await h.assert_at_rest()
    assert await h.s.lifecycle.scaling.check_scale(SC, ST, 1) is CheckScaleOutcome.SUCCESS


async def test_a_silent_report_marks_for_good_and_cold_segments_that_are_not_neighbours_stay(
    h: Harness,
) -> None:
    await make_stream(h, by_events(3))
    h.start_workers()
    at = h.s.clock.now_ms()
    assert await h.report(0, "DOWN", silent=True, at=at)
    assert await h.report(2, "DOWN", at=at)
    await h.settled()
    assert await h.cold() == {0: COLD_FOREVER, 2: at + 10 * MINUTE}
    assert await h.active_ids() == {0, 1, 2}
    await h.assert_at_rest()


# --- minimum segments, Pravega's testScaleRequestWithMinimumSegment ---------------------------


async def test_minimum_segments_are_honoured(h: Harness) -> None:
    await make_stream(h, by_events(5))
    h.start_workers()
    assert await h.s.lifecycle.updates.update_stream(SC, ST, by_events(4)) is UpdateOutcome.SUCCESS
    assert await h.active_ids() == {0, 1, 2, 3, 4}, "lowering a rate-based minimum does not scale"

    for segment in (1, 3):  # 3 is not a neighbour of 1: marks only
        assert await h.report(segment, "DOWN")
    await h.settled()
    assert await h.active_ids() == {0, 1, 2, 3, 4}

    assert await h.report(0, "DOWN")  # merges {0, 1}: down to the minimum of 4
    await h.settled()
    assert sorted(s.number for s in (await h.active()).segments) == [2, 3, 4, 5]
    assert (await h.active()).epoch == 1

    # {3, 4} would go below the minimum: marked, never merged.
    assert await h.report(4, "DOWN")
    await h.settled()
    assert (await h.active()).epoch == 1
    assert set(await h.cold()) == {3, 4}
    await h.assert_at_rest()


async def test_at_the_minimum_cold_segments_are_only_marked(h: Harness) -> None:
    # Two segments at a minimum of 2: a merge of both would leave 1.
    await make_stream(h, by_events(2))
    h.start_workers()
    for segment in (0, 1):
        assert await h.report(segment, "DOWN")
    await h.settled()
    assert await h.active_ids() == {0, 1}
    assert set(await h.cold()) == {0, 1}
    await h.assert_at_rest()


# --- reports that do nothing ----------------------------------------------------------------


async def test_an_expired_report_is_not_queued_and_one_that_expires_in_the_queue_is_dropped(
    h: Harness,
) -> None:
    await make_stream(h, by_events(1))
    now = h.s.clock.now_ms()
    assert not await h.report(0, "UP", splits=2, at=now - 10 * MINUTE)
    assert await h.s.requests.list_requests(0, 10) == []

    # Accepted a moment before it expires, processed after.
    request = NewRequest(
        RequestKind.AUTO_SCALE,
        SC,
        ST,
        now,
        payload=ScaleReport.build(0, "UP", now - 10 * MINUTE + 1, 2, False).to_payload(),
    )
    await h.store.enqueue_report(request, 0)
    await asyncio.sleep(0.01)
    h.start_workers()
    await h.settled()
    assert await h.active_ids() == {0}
    await h.assert_at_rest()


async def test_fixed_streams_ignore_reports(h: Harness) -> None:
    await make_stream(h, StreamConfig(ScalingPolicy.fixed(2)))
    h.start_workers()
    assert await h.report(0, "UP", splits=4)
    assert await h.report(0, "DOWN")
    assert await h.report(1, "DOWN", silent=True)
    await h.settled()
    assert await h.active_ids() == {0, 1}
    assert await h.cold() == {}
    await h.assert_at_rest()


async def test_a_report_on_a_sealing_stream_is_dropped_and_does_not_hold_up_the_seal(h: Harness) -> None:
    await make_stream(h, by_events(1))
    assert await h.report(0, "UP", splits=2)  # queued ahead of the seal request
    seal = asyncio.create_task(h.s.lifecycle.sealing.seal_stream(SC, ST))
    await h.state_reached(StreamState.SEALING)
    h.start_workers()
    assert await asyncio.wait_for(seal, WAIT_S) is UpdateOutcome.SUCCESS
    await h.settled()
    assert (await h.s.stream_store.get_state(SC, ST)).value is StreamState.SEALED
    assert (await h.active()).epoch == 0


# --- racing a manual scale ------------------------------------------------------------------


async def test_a_report_queued_before_a_manual_scale_waits_for_it(h: Harness) -> None:
    """The report's request is ahead of the manual scale's in the stream's queue, so it finds the
    manual transition pending: that runs first (Java postpones the report behind it), then the
    report scales the epoch the manual scale left."""
    await make_stream(h, by_events(2))
    assert await h.report(0, "UP", splits=2)
    outcome = await h.s.lifecycle.scaling.scale(SC, ST, [1], [(0.5, 0.75), (0.75, 1.0)], 0)
    assert outcome.status.value == "STARTED"
    h.start_workers()
    await h.settled()

    active = await h.active()
    assert active.epoch == 2
    assert {s.id for s in active.segments} == {seg(2, 1), seg(3, 1), seg(4, 2), seg(5, 2)}
    assert {s.id: (s.key_start, s.key_end) for s in active.segments}[seg(4, 2)] == (0.0, 0.25)
    assert await h.s.lifecycle.scaling.check_scale(SC, ST, 0) is CheckScaleOutcome.SUCCESS
    await h.assert_at_rest()


async def test_a_report_on_a_segment_a_manual_scale_seals_is_dropped(h: Harness) -> None:
    await make_stream(h, by_events(2))
    assert await h.report(0, "UP", splits=2)  # queued first
    assert (
        await h.s.lifecycle.scaling.scale(SC, ST, [0], [(0.0, 0.1), (0.1, 0.5)], 0)
    ).status.value == "STARTED"
    assert await h.report(0, "UP", splits=3)  # queued after
    h.start_workers()
    await h.settled()
    active = await h.active()
    assert active.epoch == 1, "only the manual scale ran"
    assert {s.id: (s.key_start, s.key_end) for s in active.segments} == {
        1: (0.5, 1.0),
        seg(2, 1): (0.0, 0.1),
        seg(3, 1): (0.1, 0.5),
    }
    await h.assert_at_rest()


async def test_a_manual_scale_during_an_auto_scale_gets_failure_and_the_stream_stays_consistent(
    h: Harness,
) -> None:
    await make_stream(h, by_events(2))
    h.start_workers()
    results = await asyncio.gather(
        h.report(0, "UP", splits=2),
        h.s.lifecycle.scaling.scale(SC, ST, [1], [(0.5, 0.75), (0.75, 1.0)], 0),
    )
    assert results[0] is True
    await h.settled()
    active = await h.active()
    # The manual scale either ran, or met the auto-scale's pending transition and failed.
    manual_ran = results[1].status.value == "STARTED"
    assert active.epoch == (2 if manual_ran else 1)
    assert len(active.segments) == (4 if manual_ran else 3)
    widths = sorted(s.key_end - s.key_start for s in active.segments)
    assert sum(widths) == pytest.approx(1.0)
    await h.assert_at_rest()


# --- crash safety and idempotence -------------------------------------------------------------


class CrashOnFirstSeal(WireSegmentStore):
    """The controller's client of the real store, but the first seal 'crashes' the process, after
    the new epoch was written and before the pointer moved."""

    def __init__(self, locator: SegmentStoreLocator) -> None:
        super().__init__(locator)
        self.crashed = False

    async def seal_segment(self, name: str) -> int:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("simulated crash")
        return await super().seal_segment(name)


async def pending_request(h: Harness) -> Request:
    queued = await h.s.requests.list_requests(0, 10)
    assert len(queued) == 1
    return dataclasses.replace(queued[0], not_before=0)


async def test_a_rerun_after_a_crash_mid_scale_completes_it_and_does_not_scale_twice(h: Harness) -> None:
    await make_stream(h, by_events(1))
    assert await h.report(0, "UP", splits=2)
    crashing = CrashOnFirstSeal(h.s.locator)
    deps = dataclasses.replace(h.deps(), segment_store=crashing)
    runner = RequestRunner(
        h.s.requests,
        stream_request_handlers(deps, cold_markers=h.store),
        h.s.clock,
        max_failures=TEST_SETTINGS.request_max_failures,
    )

    assert await runner.attempt(await pending_request(h)) is not None, "the crash leaves it queued"
    await crashing.close()
    assert crashing.crashed
    assert (await h.s.stream_store.get_state(SC, ST)).value is StreamState.SCALING
    assert (await h.s.stream_store.get_epoch_transition(SC, ST)).value is not None
    assert (await h.active()).epoch == 0

    # "Restart": the request runs again to its end, on a healthy segment store.
    h.start_workers()
    await h.settled()
    active = await h.active()
    assert active.epoch == 1
    assert {s.id for s in active.segments} == {seg(1, 1), seg(2, 1)}
    assert await h.s.stream_store.get_epochs(SC, ST, 0, 5) == await h.s.stream_store.get_epochs(SC, ST, 0, 1)
    await h.assert_at_rest()


async def test_a_redelivered_report_does_nothing_more(h: Harness) -> None:
    await make_stream(h, by_events(2))
    handler = AutoScaleHandler(h.deps(), h.store)

    async def started() -> None:
        return None

    delivered: list[Request] = []
    for segment, direction, splits in ((1, "UP", 2), (seg(2, 1), "DOWN", 0), (seg(3, 1), "DOWN", 0)):
        assert await h.report(segment, direction, splits=splits)
        request = await pending_request(h)
        await handler.handle(request, started)
        await h.s.requests.ack(request.id)
        delivered.append(request)
    after_once = await h.active()
    assert after_once.epoch == 2 and {s.id for s in after_once.segments} == {0, seg(4, 2)}

    # Delivered again (a crash before the acknowledgement): nothing changes.
    for request in delivered:
        await handler.handle(request, started)
    assert await h.active() == after_once
    await h.assert_at_rest()


# --- the segment store's auto-scaler on simulated traffic ----------------------------------------


async def feed(
    sim: AutoScaleMonitor, clock: ManualClock, name: str, minutes: float, per_s: int, step_s: int = 6
) -> list[ScaleDirection]:
    """Steady traffic on one segment, a report pass after every step; the directions sent."""
    sent: list[ScaleDirection] = []
    for _ in range(int(minutes * 60 / step_s)):
        clock.advance(step_s * 1000)
        sim.record(name, per_s * step_s, per_s * step_s * 100)
        sent += [r.direction for r in await sim.run_once()]
    return sent


async def test_simulated_traffic_drives_a_real_split(h: Harness) -> None:
    clock = ManualClock(h.s.clock.now_ms())
    sim = AutoScaleMonitor(h.intake, clock)
    h.segment_store = TrafficRecordingSegmentStore(h.s.segment_store, sim)
    await make_stream(h, by_events(1, scale_factor=4, target=10))
    segment0 = qualified_segment_name(SC, ST, 0)
    assert sim.created(segment0, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10)
    h.start_workers()

    # 25 events/s against a target of 10: quiet through the 10-minute cooldown, then one UP.
    assert await feed(sim, clock, segment0, 10, per_s=25) == []
    assert await feed(sim, clock, segment0, 3, per_s=25) == [ScaleDirection.UP]
    await h.settled()

    active = await h.active()
    assert {s.id for s in active.segments} == {seg(1, 1), seg(2, 1)}, "max(2, 25 // 10) = 2 pieces"
    new_names = sorted(qualified_segment_name(SC, ST, s.id) for s in active.segments)
    # The wrapped segment store told the simulator: the sealed one is forgotten, the new ones
    # tracked (and, being new, muted and in their own cooldown).
    assert sim.tracked() == new_names
    assert await feed(sim, clock, new_names[0], 5, per_s=50) == []
    await h.assert_at_rest()


async def test_simulator_reports_only_rate_based_segments_and_honours_mute_and_idle_expiry(
    h: Harness,
) -> None:
    await make_stream(h, by_events(1))
    clock = ManualClock(h.s.clock.now_ms())
    sim = AutoScaleMonitor(h.intake, clock)
    name = qualified_segment_name(SC, ST, 0)

    assert not sim.created(name, ScaleType.FIXED_NUM_SEGMENTS, 0)
    assert not sim.record(name, 1000, 1000)
    assert not sim.created(
        name + "#transaction.00000000000000010000000000000002", ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10
    )
    assert sim.created(name, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10)

    hot = await feed(sim, clock, name, 30, per_s=100)
    # First UP after the cooldown, the next only once the mute has passed.
    assert hot == [ScaleDirection.UP, ScaleDirection.UP]
    queued = [ScaleReport.from_payload(r.payload) for r in await h.s.requests.list_requests(0, 10)]
    assert [r.direction for r in queued] == [ScaleDirection.UP, ScaleDirection.UP]
    assert queued[1].timestamp - queued[0].timestamp > MUTE_MS
    assert all(r.num_of_splits == 10 for r in queued)

    # Idle past the expiry: one silent DOWN, not repeated.
    clock.advance(IDLE_EXPIRY_MS + 1)
    assert [(r.direction, r.silent) for r in await sim.run_once()] == [(ScaleDirection.DOWN, True)]
    clock.advance(IDLE_EXPIRY_MS + 1)
    assert await sim.run_once() == []
    queued = [ScaleReport.from_payload(r.payload) for r in await h.s.requests.list_requests(0, 10)]
    assert [(r.direction, r.silent) for r in queued][-1] == (ScaleDirection.DOWN, True)

    # A policy changed to FIXED stops the reports; a sealed segment is forgotten.
    assert not sim.created(name, ScaleType.FIXED_NUM_SEGMENTS, 0)
    assert sim.tracked() == []


async def test_simulator_keeps_going_when_a_report_is_refused(h: Harness) -> None:
    await make_stream(h, by_events(1))
    clock = ManualClock(h.s.clock.now_ms())
    sim = AutoScaleMonitor(h.intake, clock)
    ghost = qualified_segment_name(SC, "ghost", 0)  # a stream the controller does not know
    real = qualified_segment_name(SC, ST, 0)
    for name in (ghost, real):
        sim.created(name, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10)
    sent = []
    for _ in range(110):  # 11 minutes: one report pass past the cooldown
        clock.advance(6_000)
        for name in (ghost, real):
            sim.record(name, 600, 0)
        sent += await sim.run_once()
    assert [(r.segment_name, r.result is not None and r.result.accepted) for r in sent] == [
        (ghost, False),
        (real, True),
    ]
    # The refused report muted nothing: the ghost reports again on its next due pass.
    clock.advance(2 * MINUTE + 1)
    sim.record(ghost, 1200, 0)
    assert [r.segment_name for r in await sim.run_once()] == [ghost]


async def test_appends_through_the_wrapped_store_count_as_traffic(h: Harness) -> None:
    clock = ManualClock(h.s.clock.now_ms())
    sim = AutoScaleMonitor(h.intake, clock)
    wrapped = TrafficRecordingSegmentStore(h.s.segment_store, sim)
    name = qualified_segment_name(SC, ST, 0)
    await make_stream(h, by_events(1))
    await wrapped.update_policy(name, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 1)
    assert sim.tracked() == [name]
    sent: list[ScaleDirection] = []
    for _ in range(11 * 60):  # 11 minutes of two 10-byte events a second against a target of 1
        clock.advance(1_000)
        for _event in range(2):
            assert await wrapped.append(name, 10) > 0
        sent += [r.direction for r in await sim.run_once()]
    assert sent == [ScaleDirection.UP]
    assert (await h.s.segment_store.get_segment_info(name)).length == 2 * 10 * 11 * 60
    await wrapped.seal_segment(name)
    assert sim.tracked() == []
