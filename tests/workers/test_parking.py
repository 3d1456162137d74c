"""Parked requests over the real queue and the real handlers: a request that fails finally is
rolled back (the stream's state restored) and parked, the caller waiting for it answers FAILURE at
once, later requests of the stream run, a crash between rollback and park is safe, parking is
fenced, retried requests run again, and unexpected failures are parked after the configured cap."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TypeVar

import pytest

from app.domain.cluster import DEFAULT_COUNTS, BucketService, Fence
from app.domain.errors import InvalidInput, WriteConflict
from app.domain.records import ScaleType, ScalingPolicy, StreamConfig, StreamState, TruncationRecord
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.ports import SegmentStore
from app.services.scaling import CheckScaleOutcome
from app.services.stream_updates import UpdateOutcome
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.handlers import stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.runner import MarkStarted, RequestHandler, RequestRunner

ALL_BUCKETS = list(range(DEFAULT_COUNTS.requests))
T = TypeVar("T")


@dataclass
class Refusing:
    """The real segment store, except that the named operations refuse (a final failure)."""

    inner: SegmentStore
    refuse: frozenset[str]

    async def create_segment(self, name: str, scale_type: ScaleType, target_rate: int, rollover: int) -> None:
        if "create_segment" in self.refuse:
            raise InvalidInput(f"injected: the segment store refuses to create {name}")
        await self.inner.create_segment(name, scale_type, target_rate, rollover)

    async def seal_segment(self, name: str) -> int:
        if "seal_segment" in self.refuse:
            raise InvalidInput(f"injected: the segment store refuses to seal {name}")
        return await self.inner.seal_segment(name)

    async def delete_segment(self, name: str) -> None:
        if "delete_segment" in self.refuse:
            raise InvalidInput(f"injected: the segment store refuses to delete {name}")
        await self.inner.delete_segment(name)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.fixture
async def idle(db_url: str) -> AsyncIterator[Services]:
    """Wired services with no request workers: each test runs the requests itself, one attempt
    at a time; a waiting API call gives up after 20 s (a parked request must answer far sooner)."""
    async with running_controller(db_url, workers=False, completion_timeout_s=20.0) as services:
        yield services


def runner_for(s: Services, refuse: frozenset[str] = frozenset(), **options: float) -> RequestRunner:
    deps = WorkflowDeps(
        s.stream_store, s.scope_store, Refusing(s.segment_store, refuse), s.clock, s.txn_store
    )  # type: ignore[arg-type]
    return RequestRunner(
        s.requests,
        stream_request_handlers(deps),
        s.clock,
        retry_first_s=0.0,
        postpone_first_s=0.0,
        **{"max_failures": TEST_SETTINGS.request_max_failures, **options},  # type: ignore[arg-type]
    )


async def queued(s: Services) -> list[Request]:
    return await s.requests.pending(Processor.REQUESTS, ALL_BUCKETS, [], 100)


async def run_queue(s: Services, runner: RequestRunner, rounds: int = 50) -> None:
    """Attempts every queued (not parked) request, in id order, until none is left."""
    for _ in range(rounds):
        rows = await queued(s)
        if not rows:
            return
        for row in rows:
            await runner.attempt(row)
        await asyncio.sleep(0)
    raise AssertionError(f"requests still queued: {await queued(s)}")


async def answered_promptly(call: Awaitable[T], s: Services, runner: RequestRunner) -> T:
    """Runs the waiting API call while the queue is worked; it must answer well before its
    completion timeout."""
    started = time.monotonic()
    task = asyncio.ensure_future(call)
    while not task.done():
        await run_queue(s, runner)
        await asyncio.sleep(0.01)
        assert time.monotonic() - started < 10, "the waiting call did not answer after its request was parked"
    return task.result()


async def stream(s: Services, segments: int = 2) -> None:
    await s.scopes.create_scope("sc")
    await s.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(segments)))


async def state(s: Services) -> StreamState:
    value: StreamState = (await s.stream_store.get_state("sc", "s")).value
    return value


async def parked(s: Services) -> list[Request]:
    return await s.requests.list_parked(0, 100)


# --- each workflow's rollback -----------------------------------------------------------------


async def test_a_truncation_the_segment_store_refuses_is_parked_and_the_record_restored(
    idle: Services,
) -> None:
    s = idle
    await stream(s, 1)
    runner = runner_for(s)
    outcome = await answered_promptly(s.lifecycle.truncation.truncate_stream("sc", "s", {0: 100}), s, runner)
    assert outcome is UpdateOutcome.FAILURE
    assert await state(s) == StreamState.ACTIVE
    assert (await s.stream_store.get_truncation("sc", "s")).value == TruncationRecord()
    [row] = await parked(s)
    assert row.kind is RequestKind.TRUNCATE_STREAM and row.parked
    assert row.last_error is not None and row.last_error.startswith("InvalidInput: cannot truncate")


async def test_an_update_whose_scale_is_refused_is_parked_and_the_stream_active_again(idle: Services) -> None:
    s = idle
    await stream(s, 2)
    runner = runner_for(s, frozenset({"create_segment"}))
    new = StreamConfig(ScalingPolicy.fixed(3))
    outcome = await answered_promptly(s.lifecycle.updates.update_stream("sc", "s", new), s, runner)
    assert outcome is UpdateOutcome.FAILURE
    assert await state(s) == StreamState.ACTIVE
    # The configuration it replaced is back, not updating.
    assert (await s.stream_store.get_config_record("sc", "s")).value == (
        StreamConfig(ScalingPolicy.fixed(2)),
        False,
    )
    assert (await s.stream_store.get_epoch_transition("sc", "s")).value is None
    _state, active = await s.stream_store.get_active_epoch("sc", "s")
    assert active.epoch == 0 and len(active.segments) == 2
    assert [r.kind for r in await parked(s)] == [RequestKind.UPDATE_STREAM]


async def test_a_scale_that_is_refused_is_parked_and_check_scale_answers_internal_error(
    idle: Services,
) -> None:
    s = idle
    await stream(s, 2)
    runner = runner_for(s, frozenset({"create_segment"}))
    started = await s.lifecycle.scaling.scale("sc", "s", [1], [(0.5, 0.75), (0.75, 1.0)], 1)
    assert started.status.value == "STARTED"
    await run_queue(s, runner)
    assert await state(s) == StreamState.ACTIVE
    assert (await s.stream_store.get_epoch_transition("sc", "s")).value is None
    assert await s.lifecycle.scaling.check_scale("sc", "s", 0) is CheckScaleOutcome.INTERNAL_ERROR
    assert [r.kind for r in await parked(s)] == [RequestKind.SCALE]


async def test_a_seal_that_is_refused_is_parked_and_the_stream_active_again(idle: Services) -> None:
    s = idle
    await stream(s, 2)
    runner = runner_for(s, frozenset({"seal_segment"}))
    outcome = await answered_promptly(s.lifecycle.sealing.seal_stream("sc", "s"), s, runner)
    assert outcome is UpdateOutcome.FAILURE
    assert await state(s) == StreamState.ACTIVE
    assert [r.kind for r in await parked(s)] == [RequestKind.SEAL_STREAM]


async def test_a_recursive_scope_deletion_that_is_refused_is_parked_and_the_scope_active_again(
    idle: Services,
) -> None:
    s = idle
    await stream(s, 1)
    runner = runner_for(s, frozenset({"delete_segment"}))
    outcome = await answered_promptly(s.lifecycle.deletion.delete_scope_recursive("sc"), s, runner)
    assert outcome.value == "FAILURE"
    assert (await s.scope_store.get_scope("sc")).value.value == "ACTIVE"
    assert [r.kind for r in await parked(s)] == [RequestKind.DELETE_SCOPE]
    # The scope takes new streams again.
    await s.streams.create_stream("sc", "t", StreamConfig(ScalingPolicy.fixed(1)))


# --- the queue goes on, crashes, fences, retries ----------------------------------------------


async def test_a_parked_request_does_not_block_its_streams_later_requests(idle: Services) -> None:
    s = idle
    await stream(s, 1)
    await answered_promptly(s.lifecycle.truncation.truncate_stream("sc", "s", {0: 100}), s, runner_for(s))
    outcome = await answered_promptly(s.lifecycle.sealing.seal_stream("sc", "s"), s, runner_for(s))
    assert outcome is UpdateOutcome.SUCCESS
    assert await state(s) == StreamState.SEALED
    assert [r.kind for r in await parked(s)] == [RequestKind.TRUNCATE_STREAM]


async def test_a_crash_between_rollback_and_park_leaves_a_request_that_finishes_as_a_no_op(
    idle: Services,
) -> None:
    s = idle
    await stream(s, 2)
    await s.lifecycle.scaling.scale("sc", "s", [1], [(0.5, 0.75), (0.75, 1.0)], 1)
    refusing = runner_for(s, frozenset({"create_segment"}))
    [row] = await queued(s)
    handler = stream_request_handlers(
        WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    )[RequestKind.SCALE]
    # The runner's first steps: the workflow fails, the rollback runs, and then the process dies.
    with pytest.raises(InvalidInput):
        await refusing._handlers[RequestKind.SCALE].handle(row, _no_mark)
    await handler.rollback(row)  # type: ignore[attr-defined]
    await handler.rollback(row)  # type: ignore[attr-defined]  # idempotent
    # After the restart the row is still queued, not parked; its run finds nothing left to do.
    await run_queue(s, runner_for(s))
    assert await queued(s) == [] and await parked(s) == []
    assert await state(s) == StreamState.ACTIVE
    _state, active = await s.stream_store.get_active_epoch("sc", "s")
    assert active.epoch == 0


async def _no_mark() -> None:
    return None


async def test_parking_is_fenced_like_an_acknowledgement(idle: Services) -> None:
    s = idle
    await stream(s, 1)
    request_id = await s.requests.enqueue(NewRequest(RequestKind.SEAL_STREAM, "sc", "s", 1))
    row = await s.requests.get(request_id)
    assert row is not None
    # This process claimed the bucket with generation 7 (no cluster loop runs here).
    await s.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, generation) VALUES ('requests', $1, 7)", row.bucket
    )
    generation = 7
    # A runner that no longer owns the bucket leaves the row to the new owner.
    unowned = RequestRunner(
        s.requests,
        {},
        s.clock,
        fence_for=lambda _bucket: None,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
    assert await unowned._park(row, InvalidInput("refused")) is None
    assert await parked(s) == [] and [r.id for r in await queued(s)] == [request_id]
    stale = Fence(BucketService.REQUESTS, row.bucket, generation - 1)
    assert await s.requests.park(request_id, "E", 5, stale) is False
    assert await parked(s) == []
    held = Fence(BucketService.REQUESTS, row.bucket, generation)
    assert await s.requests.park(request_id, "E", 5, held) is True
    assert await s.requests.park(request_id, "E", 6, held) is False  # parked already
    [again] = await parked(s)
    assert (again.parked_at, again.last_error) == (5, "E")


async def test_a_retried_request_that_succeeds_clears_it_and_one_that_fails_is_parked_again(
    idle: Services,
) -> None:
    s = idle
    await stream(s, 2)
    await s.lifecycle.scaling.scale("sc", "s", [1], [(0.5, 0.75), (0.75, 1.0)], 1)
    await run_queue(s, runner_for(s, frozenset({"create_segment"})))
    [row] = await parked(s)
    assert await s.requests.unpark(row.id) is True
    assert await s.requests.unpark(row.id) is False  # not parked any more
    [requeued] = await queued(s)
    assert (requeued.id, requeued.parked, requeued.failures) == (row.id, False, 0)
    await run_queue(s, runner_for(s))
    assert await queued(s) == [] and await parked(s) == []

    # Dropped: gone for good.
    await answered_promptly(
        s.lifecycle.sealing.seal_stream("sc", "s"), s, runner_for(s, frozenset({"seal_segment"}))
    )
    [seal] = await parked(s)
    assert await s.requests.unpark(seal.id) is True
    # The seal was rolled back, so its retry has nothing to do: it is acknowledged.
    await run_queue(s, runner_for(s, frozenset({"seal_segment"})))
    assert await parked(s) == [] and await queued(s) == []
    assert await s.requests.drop_parked(seal.id) is False


@dataclass
class Failing:
    error: Exception
    calls: int = 0

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        self.calls += 1
        raise self.error


async def test_unexpected_failures_are_parked_after_the_cap_and_transient_ones_never(idle: Services) -> None:
    s = idle
    await stream(s, 1)
    broken = Failing(RuntimeError("a bug"))
    racing = Failing(WriteConflict("lost a race"))
    handlers: dict[RequestKind, RequestHandler] = {
        RequestKind.DELETE_STREAM: broken,
        RequestKind.SEAL_STREAM: racing,
    }
    runner = RequestRunner(s.requests, handlers, s.clock, retry_first_s=0.0, max_failures=3)
    await s.requests.enqueue(NewRequest(RequestKind.DELETE_STREAM, "sc", "s", 1))
    await s.requests.enqueue(NewRequest(RequestKind.SEAL_STREAM, "sc", "other", 1))
    for _ in range(6):
        for row in await queued(s):
            await runner.attempt(row)
    assert broken.calls == 3 and racing.calls == 6
    [row] = await parked(s)
    assert row.kind is RequestKind.DELETE_STREAM and row.last_error == "RuntimeError: a bug"
    [still] = await queued(s)
    assert still.kind is RequestKind.SEAL_STREAM and still.failures == 0


async def test_a_kind_without_a_handler_waits_and_is_never_parked(idle: Services) -> None:
    s = idle
    runner = RequestRunner(s.requests, {}, s.clock, retry_first_s=0.0, max_failures=1)
    await s.requests.enqueue(NewRequest(RequestKind.SEAL_STREAM, "sc", "s", 1))
    for _ in range(3):
        for row in await queued(s):
            await runner.attempt(row)
    assert await parked(s) == []
    [row] = await queued(s)
    assert row.attempts == 3 and "no handler" in (row.last_error or "")
