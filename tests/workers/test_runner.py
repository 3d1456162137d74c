"""The request runner over the real queue: a request whose processing raises is retried and
never lost; the fairness barrier holds other processors back while one waits on a stream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from app.domain.cluster import DEFAULT_COUNTS
from app.domain.errors import StoreUnavailable
from app.domain.records import ScaleType, ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.ports import SegmentStore
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.dispatcher import RequestDispatcher
from workers.handlers import abort_handlers, commit_handlers, creation_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.handlers.kvtables import kvt_handlers
from workers.handlers.readergroups import reader_group_handlers
from workers.runner import MarkStarted, RequestHandler, RequestRunner

ALL_BUCKETS = frozenset(range(DEFAULT_COUNTS.requests))


@dataclass
class FlakyCreates:
    """The real segment store, except that the first `failures` creates raise."""

    inner: SegmentStore
    failures: int
    calls: int = 0
    second_call: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def create_segment(self, name: str, scale_type: ScaleType, target_rate: int, rollover: int) -> None:
        self.calls += 1
        if self.calls == 2:
            self.second_call.set()
            await self.release.wait()
        if self.calls <= self.failures:
            raise StoreUnavailable("injected: segment store unreachable")
        await self.inner.create_segment(name, scale_type, target_rate, rollover)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@contextlib.asynccontextmanager
async def dispatching(
    services: Services,
    handlers: dict[RequestKind, RequestHandler],
    processor: Processor = Processor.REQUESTS,
) -> AsyncIterator[RequestDispatcher]:
    runner = RequestRunner(
        services.requests,
        handlers,
        services.clock,
        processor=processor,
        retry_first_s=0.05,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
    dispatcher = RequestDispatcher(
        services.requests,
        runner,
        lambda: ALL_BUCKETS,
        processor=processor,
        ceiling=TEST_SETTINGS.request_concurrency,
        poll_s=0.05,
    )
    task = asyncio.create_task(dispatcher.run())
    try:
        yield dispatcher
    finally:
        await dispatcher.stop(2)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def idle_services(db_url: str) -> AsyncIterator[Services]:
    """Wired services with no request workers: each test runs its own dispatcher."""
    async with running_controller(db_url, workers=False) as services:
        yield services


async def test_a_request_whose_processing_raises_is_retried_and_never_lost(idle_services: Services) -> None:
    s = idle_services
    await s.scopes.create_scope("sc")
    await s.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(2)))
    outcome = await s.lifecycle.scaling.scale("sc", "s", [1], [(0.5, 0.75), (0.75, 1.0)], 1)
    assert outcome.status.value == "STARTED"
    flaky = FlakyCreates(s.segment_store, failures=2)
    deps = WorkflowDeps(s.stream_store, s.scope_store, flaky, s.clock, s.txn_store)  # type: ignore[arg-type]
    async with dispatching(s, stream_request_handlers(deps)):
        await asyncio.wait_for(flaky.second_call.wait(), 10)
        # Between attempts the request is still queued, with the failure on record.
        row = await s.pool.fetchrow("SELECT attempts, last_error, started FROM requests")
        assert row["attempts"] == 1 and "injected" in row["last_error"] and row["started"]
        assert (await s.stream_store.get_state("sc", "s")).value == StreamState.SCALING
        flaky.release.set()
        for _ in range(200):
            if await s.pool.fetchval("SELECT count(*) FROM requests") == 0:
                break
            await asyncio.sleep(0.05)
    assert await s.pool.fetchval("SELECT count(*) FROM requests") == 0
    assert flaky.calls == 4  # two failed attempts, then both new segments created
    _state, active = await s.stream_store.get_active_epoch("sc", "s")
    assert active.epoch == 1 and (await s.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE


@dataclass
class Recorder:
    events: list[str]

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        self.events.append(f"commit:{request.stream}")


async def test_fairness_barrier_postpones_other_processors_until_the_waiting_one_ran(
    idle_services: Services,
) -> None:
    s = idle_services
    await s.scopes.create_scope("sc")
    await s.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    # A commit workflow holds the stream; the update cannot move ACTIVE -> UPDATING yet.
    state = await s.stream_store.get_state("sc", "s")
    await s.stream_store.set_state("sc", "s", StreamState.COMMITTING_TXN, state.version)
    events: list[str] = []
    update = asyncio.create_task(
        s.lifecycle.updates.update_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1), tags=("t",)))
    )
    async with dispatching(
        s,
        stream_request_handlers(
            WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
        ),
    ):
        for _ in range(200):
            waiting = await s.requests.get_waiting_processor("sc", "s")
            if waiting is not None:
                break
            await asyncio.sleep(0.02)
        assert waiting is not None and waiting.value == Processor.REQUESTS.value
        await s.requests.enqueue(
            NewRequest(RequestKind.SCALE, "sc", "s", s.clock.now_ms(), processor=Processor.COMMITS)
        )
        async with dispatching(s, {RequestKind.SCALE: Recorder(events)}, Processor.COMMITS):
            await asyncio.sleep(0.5)
            assert events == []  # held back by the barrier, not failed
            postponed = await s.pool.fetchrow(
                "SELECT attempts, last_error FROM requests WHERE processor = 'commits'"
            )
            assert postponed["attempts"] >= 1 and "waiting" in postponed["last_error"]
            # The commit workflow finishes; the update runs, clears the barrier, then the commit runs.
            state = await s.stream_store.get_state("sc", "s")
            await s.stream_store.set_state("sc", "s", StreamState.ACTIVE, state.version)
            assert (await asyncio.wait_for(update, 20)).value == "SUCCESS"
            for _ in range(100):
                if events:
                    break
                await asyncio.sleep(0.05)
    assert events == ["commit:s"]
    assert await s.requests.get_waiting_processor("sc", "s") is None
    assert await s.pool.fetchval("SELECT count(*) FROM requests") == 0


async def test_waiting_processor_is_set_once_when_two_race(idle_services: Services) -> None:
    s = idle_services
    await s.scopes.create_scope("sc")
    await s.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    results = await asyncio.gather(
        s.requests.set_waiting_processor("sc", "s", Processor.REQUESTS),
        s.requests.set_waiting_processor("sc", "s", Processor.COMMITS),
    )
    assert results[0] == results[1] and results[0] in ("requests", "commits")
    loser = Processor.COMMITS if results[0] == "requests" else Processor.REQUESTS
    await s.requests.clear_waiting_processor("sc", "s", loser)  # not the holder: no effect
    assert (await s.requests.get_waiting_processor("sc", "s")) is not None
    await s.requests.clear_waiting_processor("sc", "s", Processor(results[0]))
    assert (await s.requests.get_waiting_processor("sc", "s")) is None


def test_every_request_kind_has_exactly_one_handler() -> None:
    deps = WorkflowDeps(None, None, None, None, None)  # type: ignore[arg-type]
    tables = [
        stream_request_handlers(deps),
        creation_handlers(deps, None, None),  # type: ignore[arg-type]
        commit_handlers(CommitTxnsHandler(deps, None)),  # type: ignore[arg-type]
        abort_handlers(deps),
        reader_group_handlers(deps, None, None),  # type: ignore[arg-type]
        kvt_handlers(deps, None),  # type: ignore[arg-type]
    ]
    kinds = [kind for table in tables for kind in table]
    assert sorted(k.value for k in kinds) == sorted(k.value for k in RequestKind)
