"""Retention end to end over a real database and the embedded segment store: tail cuts from
real segment lengths, TIME and SIZE policies with min and max, consumption-based bounds from
subscribers, purge, the worker's schedule and fencing, and a truncation that happens on its
own through the worker's run() loop and the real request workers.

The clock is a fake advanced by the tests, so recording times and ages are exact; retention's
frequency is 30 minutes of that clock unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from app.clock import SystemClock
from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.errors import NotFound
from app.domain.ids import qualified_segment_name
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    StreamConfig,
    StreamState,
    TruncationRecord,
)
from app.domain.requests import Processor, RequestKind
from app.services.retention import (
    CycleOutcome,
    RetentionService,
    SubscriberService,
    SubscriberUpdate,
    TruncationStart,
)
from app.store.retention import PgRetentionStore
from app.testing.clock import ManualClock
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.handlers import stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.retention import RetentionWorker
from workers.runner import RequestRunner

SC = "ret"
ST = "s"
MINUTE = 60_000
F = 30 * MINUTE
LONG_MAX = 2**63 - 1
RG = uuid.UUID("11111111-2222-3333-4444-555555555555")
REQUEST_BUCKETS = list(range(16))


@dataclass
class Rig:
    s: Services
    clock: ManualClock
    store: PgRetentionStore
    service: RetentionService
    subscribers: SubscriberService
    fence: Fence

    def worker(
        self,
        *,
        owned: frozenset[int] = frozenset({0}),
        bucket_count: int = 1,
        fence_for: Callable[[int], Fence | None] | None = None,
        service: RetentionService | None = None,
        tick_s: float | None = None,
    ) -> RetentionWorker:
        def fences(bucket: int) -> Fence | None:
            return dataclasses.replace(self.fence, bucket=bucket) if bucket in owned else None

        return RetentionWorker(
            self.store,
            service or self.service,
            self.clock,
            owned=lambda: owned,
            bucket_count=bucket_count,
            fence_for=fence_for or fences,
            frequency_ms=self.service.frequency_ms,
            tick_s=tick_s,
            retry_delay_s=0,
        )


async def claim(s: Services, bucket: int = 0) -> Fence:
    """The retention bucket's current claim: the controller's own when its workers took it,
    else one written here (no workers run)."""
    generation = await s.pool.fetchval(
        "SELECT generation FROM bucket_owners "
        "WHERE service = 'retention' AND bucket = $1 AND owner IS NOT NULL",
        bucket,
    )
    if generation is None:
        generation = await s.pool.fetchval(
            "INSERT INTO bucket_owners (service, bucket, owner, generation) "
            "VALUES ('retention', $1, 'test', 1) "
            "ON CONFLICT (service, bucket) "
            "DO UPDATE SET owner = 'test', generation = bucket_owners.generation + 1 "
            "RETURNING generation",
            bucket,
        )
    return Fence(BucketService.RETENTION, bucket, generation)


def make_rig(s: Services, fence: Fence, frequency_ms: int = F) -> Rig:
    clock = ManualClock(SystemClock().now_ms())
    store = PgRetentionStore(s.pool)
    service = RetentionService(s.stream_store, store, s.segment_store, clock, frequency_ms=frequency_ms)
    return Rig(s, clock, store, service, SubscriberService(s.stream_store, store, clock), fence)


@pytest.fixture
async def rig(db_url: str) -> AsyncIterator[Rig]:
    async with running_controller(db_url, workers=False) as s:
        await s.scopes.create_scope(SC)
        yield make_rig(s, await claim(s))


async def make_stream(rig: Rig, policy: RetentionPolicy | None, name: str = ST, segments: int = 2) -> None:
    await rig.s.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(segments), retention=policy))


async def write(rig: Rig, *sizes: int, name: str = ST) -> None:
    """Appends sizes[i] bytes to segment i (epoch 0) of the stream."""
    for segment, size in enumerate(sizes):
        if size:
            await rig.s.segment_store.append(qualified_segment_name(SC, name, segment), size)


async def records(rig: Rig, name: str = ST) -> list[tuple[int, dict[int, int]]]:
    return [(r.recording_size, dict(r.stream_cut)) for r in (await rig.store.get_context(SC, name)).records]


async def truncation(rig: Rig, name: str = ST) -> TruncationRecord:
    record: TruncationRecord = (await rig.s.stream_store.get_truncation(SC, name)).value
    return record


async def complete_truncation(rig: Rig, name: str = ST) -> None:
    """What the truncate workflow's last step does (completeTruncation in Java's tests)."""
    current = await rig.s.stream_store.get_truncation(SC, name)
    done = dataclasses.replace(current.value, updating=False)
    await rig.s.stream_store.set_truncation(SC, name, done, current.version)


async def truncate_requests(rig: Rig) -> int:
    pending = await rig.s.requests.pending(Processor.REQUESTS, REQUEST_BUCKETS, [], 100)
    return sum(r.kind is RequestKind.TRUNCATE_STREAM for r in pending)


def size_policy(low: int, high: int = LONG_MAX) -> RetentionPolicy:
    return RetentionPolicy(RetentionType.SIZE, low, high)


def time_policy(low: int, high: int = LONG_MAX) -> RetentionPolicy:
    return RetentionPolicy(RetentionType.TIME, low, high)


# --- SIZE ----------------------------------------------------------------------------------------


async def test_size_retention_through_the_worker(rig: Rig) -> None:
    """sizeBasedRetentionStreamTest with real segment lengths: SIZE min 100."""
    await make_stream(rig, size_policy(100))
    worker = rig.worker()
    await write(rig, 9, 10)

    first = await worker.run_once()
    assert (first.members, first.due) == (1, 0)  # newly seen: first run one period later
    rig.clock.advance(F)
    done = await worker.run_once()
    assert (done.due, done.recorded, done.truncations) == (1, 1, 0)
    assert await records(rig) == [(19, {0: 9, 1: 10})]
    assert (await worker.run_once()).due == 0  # next run one period after this one

    await write(rig, 41, 40)
    rig.clock.advance(F + 1)
    done = await worker.run_once()
    assert (done.recorded, done.truncations) == (1, 0)  # retained(cut1) = 81 < 100
    assert [size for size, _ in await records(rig)] == [19, 100]

    await write(rig, 10, 10)
    rig.clock.advance(F + 1)
    done = await worker.run_once()
    assert (done.recorded, done.truncations, done.purged) == (1, 1, 1)
    assert await records(rig) == [(100, {0: 50, 1: 50}), (120, {0: 60, 1: 60})]
    started = await truncation(rig)
    assert started.updating and started.stream_cut == {0: 9, 1: 10} and started.size_till == 19
    assert await truncate_requests(rig) == 1

    # While that truncation is in progress the next cycle records but does not start another.
    await write(rig, 100, 100)
    rig.clock.advance(F + 1)
    done = await worker.run_once()
    assert (done.recorded, done.truncations) == (1, 0)
    assert await truncate_requests(rig) == 1


async def test_size_max_bounds_a_lagging_subscriber(rig: Rig) -> None:
    """consumptionBasedRetentionSizeLimitTest: SIZE min 2, max 10, two subscribers."""
    await make_stream(rig, size_policy(2, 10))
    rig.service = RetentionService(
        rig.s.stream_store, rig.store, rig.s.segment_store, rig.clock, frequency_ms=1
    )
    subs = rig.subscribers
    for name in ("a", "b"):
        await subs.add_subscriber(SC, ST, f"{SC}/{name}", RG, 0)

    async def publish(cut: dict[int, int]) -> None:
        for name in ("a", "b"):
            status = await subs.update_subscriber_stream_cut(SC, ST, f"{SC}/{name}", str(RG), 0, cut)
            assert status is SubscriberUpdate.SUCCESS

    async def cycle() -> CycleOutcome:
        rig.clock.advance(10)
        return await rig.service.run_cycle(SC, ST, rig.fence)

    # 1. tail {0:2,1:2}; the lower bound {0:1,1:1} retains 2, within [min, max): truncate at it.
    await write(rig, 2, 2)
    assert await subs.update_subscriber_stream_cut(SC, ST, f"{SC}/a", str(RG), 0, {0: 2, 1: 1}) is (
        SubscriberUpdate.SUCCESS
    )
    assert await subs.update_subscriber_stream_cut(SC, ST, f"{SC}/b", str(RG), 0, {0: 1, 1: 2}) is (
        SubscriberUpdate.SUCCESS
    )
    outcome = await cycle()
    assert outcome.truncation is TruncationStart.STARTED and outcome.truncated_at == {0: 1, 1: 1}
    await complete_truncation(rig)

    # 2. both read up to the tail: the bound retains 0 < min and nothing retains min.
    await publish({0: 2, 1: 2})
    outcome = await cycle()
    assert outcome.recorded is not None and outcome.truncation is None
    assert (await truncation(rig)).stream_cut == {0: 1, 1: 1}

    # 3. tail {0:10,1:10}, bound {0:10,1:9} retains 1 < min; min {0:2,1:2} is Before it.
    await write(rig, 8, 8)
    await publish({0: 10, 1: 9})
    outcome = await cycle()
    assert outcome.truncated_at == {0: 2, 1: 2}
    assert [cut for _, cut in await records(rig)] == [{0: 10, 1: 10}]  # purged up to {0:2,1:2}
    await complete_truncation(rig)

    # 4. tail {0:20,1:20}: the bound retains 21 >= max; max {0:10,1:10} retains 20 < 21.
    await write(rig, 10, 10)
    outcome = await cycle()
    assert outcome.truncated_at == {0: 10, 1: 10}
    assert (await truncation(rig)).size_till == 20


# --- TIME ----------------------------------------------------------------------------------------


async def test_time_retention_min_without_subscribers(rig: Rig) -> None:
    """timeBasedRetentionStreamTest: TIME min 60 min, records every 30 min."""
    await make_stream(rig, time_policy(60 * MINUTE))
    fence = rig.fence
    await write(rig, 1, 1)
    t = rig.clock.now
    assert (await rig.service.run_cycle(SC, ST, fence)).recorded is not None

    await write(rig, 9, 9)
    rig.clock.now = t + 5 * MINUTE
    assert (await rig.service.run_cycle(SC, ST, fence)).recorded is None  # too soon to record
    rig.clock.now = t + 30 * MINUTE + 1
    await write(rig, 10, 10)
    outcome = await rig.service.run_cycle(SC, ST, fence)
    assert outcome.recorded is not None and outcome.truncation is None

    rig.clock.now = t + 60 * MINUTE + 2
    outcome = await rig.service.run_cycle(SC, ST, fence)
    assert outcome.truncation is TruncationStart.STARTED and outcome.truncated_at == {0: 1, 1: 1}
    assert [cut for _, cut in await records(rig)] == [{0: 20, 1: 20}, {0: 20, 1: 20}]


async def test_time_retention_max_bounds_a_lagging_subscriber(rig: Rig) -> None:
    """TIME min 60 min, max 90 min, one subscriber that stopped reading at {0:5,1:5}."""
    await make_stream(rig, time_policy(60 * MINUTE, 90 * MINUTE))
    await rig.subscribers.add_subscriber(SC, ST, f"{SC}/slow", RG, 0)
    status = await rig.subscribers.update_subscriber_stream_cut(
        SC, ST, f"{SC}/slow", str(RG), 0, {0: 5, 1: 5}
    )
    assert status is SubscriberUpdate.SUCCESS
    t = rig.clock.now
    for step in range(3):  # records at t, t+30m+1, t+60m+2 of {10,10}, {20,20}, {30,30}
        await write(rig, 10, 10)
        rig.clock.now = t + step * (F + 1)
        outcome = await rig.service.run_cycle(SC, ST, rig.fence)
    # min is the record of t (age 60m+2), after the subscriber; nothing is 90 min old yet.
    assert outcome.truncated_at == {0: 5, 1: 5}
    assert [cut for _, cut in await records(rig)] == [{0: 10, 1: 10}, {0: 20, 1: 20}, {0: 30, 1: 30}]
    await complete_truncation(rig)

    await write(rig, 10, 10)
    rig.clock.now = t + 3 * (F + 1)
    outcome = await rig.service.run_cycle(SC, ST, rig.fence)
    # The record of t is now over 90 min old and the subscriber is before it: truncate at max,
    # the oldest record within [60, 90] min, and purge it and everything older.
    assert outcome.truncated_at == {0: 20, 1: 20}
    assert [cut for _, cut in await records(rig)] == [{0: 30, 1: 30}, {0: 40, 1: 40}]


async def test_a_manual_truncation_ahead_of_the_choice_is_left_alone(rig: Rig) -> None:
    await make_stream(rig, size_policy(10))
    await write(rig, 5, 5)
    await rig.service.run_cycle(SC, ST, rig.fence)
    await write(rig, 20, 20)
    current = await rig.s.stream_store.get_truncation(SC, ST)
    ahead = TruncationRecord(stream_cut={0: 20, 1: 20}, span={0: 0, 1: 0}, size_till=40)
    await rig.s.stream_store.set_truncation(SC, ST, ahead, current.version)

    rig.clock.advance(F + 1)
    outcome = await rig.service.run_cycle(SC, ST, rig.fence)
    assert outcome.truncation is TruncationStart.BEHIND and outcome.truncated_at == {0: 5, 1: 5}
    assert outcome.purged_up_to is None
    assert await truncation(rig) == ahead
    assert await truncate_requests(rig) == 0


async def test_sizes_count_sealed_segments_across_a_scale(rig: Rig) -> None:
    await make_stream(rig, size_policy(1_000))
    await write(rig, 30, 40)
    await rig.service.run_cycle(SC, ST, rig.fence)
    # Scale 0 into two; the sealed size of 0 is its final length, recorded by the scale.
    await write(rig, 5, 0)
    deps_scale = await rig.s.lifecycle.scaling.scale(SC, ST, [0], [(0.0, 0.25), (0.25, 0.5)], rig.clock.now)
    assert deps_scale.status.value == "STARTED"
    # The scale workflow needs the request workers, which do not run here.
    await _run_requests(rig)
    new = sorted(s.id for s in (await rig.s.stream_store.get_active_epoch(SC, ST))[1].segments if s.id > 1)
    for segment in new:
        await rig.s.segment_store.append(qualified_segment_name(SC, ST, segment), 7)
    rig.clock.advance(F + 1)
    outcome = await rig.service.run_cycle(SC, ST, rig.fence)
    assert outcome.recorded is not None
    # 70 recorded before; then 5 more in segment 0 (sealed at 35) and 7 in each new segment.
    assert outcome.recorded.recording_size == 70 + 5 + 14
    assert outcome.recorded.stream_cut == {1: 40, new[0]: 7, new[1]: 7}


async def _run_requests(rig: Rig) -> None:
    s = rig.s
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    runner = RequestRunner(
        s.requests, stream_request_handlers(deps), s.clock, max_failures=TEST_SETTINGS.request_max_failures
    )
    for _ in range(5):
        pending = await s.requests.pending(Processor.REQUESTS, REQUEST_BUCKETS, [], 100)
        if not pending:
            return
        for request in pending:
            await runner.attempt(dataclasses.replace(request, not_before=0))


# --- the worker: schedule, membership, fencing, retries ---------------------------------------------


async def test_only_streams_of_owned_buckets_are_worked(rig: Rig) -> None:
    names = [f"m{i}" for i in range(8)]
    for name in names:
        await make_stream(rig, size_policy(1), name=name)
        await write(rig, 1, 1, name=name)
    await make_stream(rig, None, name="plain")
    mine = {n for n in names if stream_bucket(SC, n, 2) == 0}
    assert mine and mine != set(names)
    worker = rig.worker(owned=frozenset({0}), bucket_count=2)
    assert (await worker.run_once()).members == len(mine)
    rig.clock.advance(F)
    assert (await worker.run_once()).recorded == len(mine)
    for name in names:
        assert bool(await records(rig, name)) == (name in mine)


async def test_a_new_owner_keeps_the_cadence_of_the_records(rig: Rig) -> None:
    await make_stream(rig, size_policy(1))
    await write(rig, 1, 1)
    await rig.service.run_cycle(SC, ST, rig.fence)
    recorded_at = rig.clock.now
    rig.clock.advance(F // 2)
    worker = rig.worker()  # a process that just took the bucket over
    assert (await worker.run_once()).due == 0
    rig.clock.now = recorded_at + F + 1
    done = await worker.run_once()
    assert (done.due, done.recorded) == (1, 1)


async def test_a_stale_fence_records_nothing(rig: Rig) -> None:
    await make_stream(rig, size_policy(1))
    await write(rig, 1, 1)
    # Another process claimed the bucket since this one did.
    await rig.s.pool.execute(
        "UPDATE bucket_owners SET generation = generation + 1 WHERE service = 'retention' AND bucket = 0"
    )
    worker = rig.worker()
    await worker.run_once()
    rig.clock.advance(F)
    done = await worker.run_once()
    assert (done.due, done.fenced, done.recorded) == (1, 1, 0)
    assert await records(rig) == []


async def test_a_bucket_lost_before_the_cycle_is_left_alone(rig: Rig) -> None:
    await make_stream(rig, size_policy(1))
    owned = {0}
    worker = rig.worker(fence_for=lambda b: rig.fence if b in owned else None)
    await worker.run_once()
    rig.clock.advance(F)
    owned.clear()  # lost between listing and the cycle
    done = await worker.run_once()
    assert (done.due, done.fenced, done.recorded) == (1, 1, 0)
    assert await records(rig) == []


async def test_a_failing_cycle_is_retried_five_times_then_left_to_the_next_period(rig: Rig) -> None:
    await make_stream(rig, size_policy(1))
    calls: list[int] = []

    class Counting(RetentionService):
        async def run_cycle(self, scope: str, name: str, fence: Fence) -> CycleOutcome:
            calls.append(rig.clock.now)
            return await super().run_cycle(scope, name, fence)

    counting = Counting(rig.s.stream_store, rig.store, rig.s.segment_store, rig.clock, frequency_ms=F)
    worker = rig.worker(service=counting)
    await rig.s.segment_store.delete_segment(qualified_segment_name(SC, ST, 1))
    with pytest.raises(NotFound):
        await rig.s.segment_store.get_segment_info(qualified_segment_name(SC, ST, 1))
    await worker.run_once()
    rig.clock.advance(F)
    done = await worker.run_once()
    assert (done.due, done.failed, done.recorded) == (1, 1, 0)
    assert len(calls) == 5
    assert (await worker.run_once()).due == 0  # tried again only next period
    rig.clock.advance(F)
    await worker.run_once()
    assert len(calls) == 10


async def test_streams_without_a_policy_or_not_active_are_skipped(rig: Rig) -> None:
    await rig.s.streams.create_stream(SC, "plain", StreamConfig(ScalingPolicy.fixed(1)))
    assert (await rig.service.run_cycle(SC, "plain", rig.fence)).skipped == "no retention policy"
    await make_stream(rig, size_policy(1), name="sealed")
    state = await rig.s.stream_store.get_state(SC, "sealed")
    await rig.s.stream_store.set_state(SC, "sealed", StreamState.SEALED, state.version)
    assert (await rig.service.run_cycle(SC, "sealed", rig.fence)).skipped == "stream is SEALED"
    assert await records(rig, "sealed") == []


# --- subscribers ---------------------------------------------------------------------------------


async def test_subscriber_registration_raises_generations_and_removal_respects_them(rig: Rig) -> None:
    await make_stream(rig, size_policy(1))
    subs = rig.subscribers
    name = f"{SC}/rg"
    await subs.add_subscriber(SC, ST, name, RG, 0)
    assert await subs.update_subscriber_stream_cut(SC, ST, name, str(RG), 0, {0: 0, 1: 0}) is (
        SubscriberUpdate.SUCCESS
    )
    await subs.add_subscriber(SC, ST, name, RG, 2)  # a reader-group update: generation raised, cut kept
    await subs.add_subscriber(SC, ST, name, RG, 1)  # never lowered
    found = await rig.store.get_subscriber(SC, ST, name)
    assert found is not None
    assert (found.value.generation, found.value.truncation_stream_cut) == (2, {0: 0, 1: 0})
    assert not await subs.remove_subscriber(SC, ST, name, 1)  # an older generation removes nothing
    assert await subs.list_subscribers(SC, ST) == [name]
    assert await subs.remove_subscriber(SC, ST, name, 2)
    assert await subs.list_subscribers(SC, ST) == []
    assert not await subs.remove_subscriber(SC, ST, name, 2)
    with pytest.raises(NotFound):
        await subs.add_subscriber(SC, "missing", name, RG, 0)


# --- on its own ----------------------------------------------------------------------------------


async def test_truncation_happens_on_its_own(db_url: str) -> None:
    """The worker's run() loop and the real request workers: data is written, time passes,
    and the stream ends up truncated in the segment store without anyone asking."""
    async with running_controller(db_url) as s:
        await s.scopes.create_scope(SC)
        rig = make_rig(s, await claim(s), frequency_ms=1_000)
        await make_stream(rig, size_policy(30))
        loop = asyncio.create_task(rig.worker(tick_s=0.02).run())
        try:
            for round_ in range(1, 3):
                await write(rig, 20, 20)
                await _advance_until(rig, round_)

            async def truncated() -> bool:
                record = await truncation(rig)
                if record.updating or record.stream_cut != {0: 20, 1: 20}:
                    return False
                infos = [
                    await s.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))
                    for segment in (0, 1)
                ]
                return [i.start_offset for i in infos] == [20, 20]

            await _eventually(truncated)

            # The handler completes the record, then moves the stream back: under load a check
            # can fall between the two, so the state is awaited (a stuck TRUNCATING still fails).
            async def active_again() -> bool:
                return (await s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE

            await _eventually(active_again)
            # The record truncated at was purged; what is left was taken after the last write.
            left = await records(rig)
            assert left and all(r == (80, {0: 40, 1: 40}) for r in left)
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop


async def _advance_until(rig: Rig, count: int) -> None:
    """Lets a period pass until the loop has recorded `count` cuts (or truncated). The period
    is passed again if the loop first saw the stream only after the clock moved (it is due one
    period after it was first seen)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while loop.time() < deadline:
        rig.clock.advance(1_001)
        waited_until = loop.time() + 1.0
        while loop.time() < waited_until:
            context = await rig.store.get_context(SC, ST)
            if len(context.records) >= count or context.truncation.value.stream_cut:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"the retention loop did not record {count} cuts")


async def _eventually(check: Callable[[], object], timeout_s: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if await check():  # type: ignore[misc]
            return
        if loop.time() > deadline:
            raise AssertionError(f"{check} did not hold within {timeout_s} s")
        await asyncio.sleep(0.02)
