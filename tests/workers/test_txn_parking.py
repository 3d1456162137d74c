"""Commits and aborts that fail finally: the request is parked, its transactions end in a final
state (an abandoned commit's batch ABORTED, a refused abort ABORTED), and the stream is left
sealable and deletable: no transaction stays COMMITTING or ABORTING with nothing to run it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest

from app.domain.cluster import DEFAULT_COUNTS
from app.domain.errors import InvalidInput
from app.domain.ids import qualified_segment_name, transaction_segment_name
from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import Processor, Request, RequestKind
from app.domain.txns import Outcome, TxnId, TxnStatus
from app.metrics.registry import REGISTRY
from app.ports import SegmentStore
from app.services.deletion import DeleteStreamOutcome
from app.services.stream_updates import UpdateOutcome
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.handlers import abort_handlers, commit_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner

ALL_BUCKETS = list(range(DEFAULT_COUNTS.requests))
SC, ST = "tp", "s"
LEASE = 10_000
T = TypeVar("T")


@dataclass
class Refusing:
    """The real segment store, except that the named transaction operations refuse finally."""

    inner: SegmentStore
    refuse: frozenset[str]

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        if "merge" in self.refuse:
            raise InvalidInput(f"injected: the segment store refuses to merge into {segment_name}")
        return await self.inner.merge_transaction_segments(segment_name, txns, txn_parent=txn_parent)

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None:
        if "abort" in self.refuse:
            raise InvalidInput(f"injected: the segment store refuses to drop a transaction of {segment_name}")
        await self.inner.abort_transaction_segment(segment_name, txn_high, txn_low)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.fixture
async def idle(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False, completion_timeout_s=20.0) as services:
        await services.scopes.create_scope(SC)
        await services.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(2)))
        # Pings and state answers need the timeout service running; owning no bucket, it
        # aborts nothing behind the test's back.
        sweeper = asyncio.create_task(services.txn_sweeper.run())
        await asyncio.sleep(0)
        try:
            yield services
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper


def runners(s: Services, refuse: frozenset[str] = frozenset()) -> dict[Processor, RequestRunner]:
    deps = WorkflowDeps(
        s.stream_store, s.scope_store, Refusing(s.segment_store, refuse), s.clock, s.txn_store
    )  # type: ignore[arg-type]
    handler = CommitTxnsHandler(deps, s.requests)
    options = {
        "retry_first_s": 0.0,
        "postpone_first_s": 0.0,
        "max_failures": TEST_SETTINGS.request_max_failures,
    }
    return {
        Processor.COMMITS: RequestRunner(
            s.requests,
            commit_handlers(handler),
            s.clock,
            processor=Processor.COMMITS,
            started_check=handler.started,
            **options,  # type: ignore[arg-type]
        ),
        Processor.ABORTS: RequestRunner(
            s.requests,
            abort_handlers(deps),
            s.clock,
            processor=Processor.ABORTS,
            barrier=False,
            **options,  # type: ignore[arg-type]
        ),
        Processor.REQUESTS: RequestRunner(
            s.requests,
            stream_request_handlers(deps),
            s.clock,
            **options,  # type: ignore[arg-type]
        ),
    }


async def run_queues(s: Services, by: dict[Processor, RequestRunner]) -> None:
    """One attempt for every queued (not parked) request of every processor."""
    for processor, runner in by.items():
        for row in await s.requests.pending(processor, ALL_BUCKETS, [], 100):
            await runner.attempt(dataclasses.replace(row, not_before=0))


async def answered_promptly(call: Awaitable[T], s: Services, by: dict[Processor, RequestRunner]) -> T:
    started = time.monotonic()
    task = asyncio.ensure_future(call)
    while not task.done():
        await run_queues(s, by)
        await asyncio.sleep(0.01)
        assert time.monotonic() - started < 10, "the waiting call did not answer"
    return task.result()


async def parked(s: Services) -> list[Request]:
    return await s.requests.list_parked(0, 100)


async def txn_with_data(s: Services) -> TxnId:
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    for parent in (0, 1):
        await s.segment_store.append(txn_segment(txn, parent), 5)
    return txn


def txn_segment(txn: TxnId, parent: int) -> str:
    return transaction_segment_name(qualified_segment_name(SC, ST, parent), txn.high, txn.low)


async def length(s: Services, segment: int) -> int:
    info = await s.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))
    return int(info.length)


async def assert_sealable_and_deletable(s: Services) -> None:
    fine = runners(s)
    assert await answered_promptly(s.lifecycle.sealing.seal_stream(SC, ST), s, fine) is UpdateOutcome.SUCCESS
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.SEALED
    deleted = await answered_promptly(s.lifecycle.deletion.delete_stream(SC, ST), s, fine)
    assert deleted is DeleteStreamOutcome.SUCCESS


def sample(name: str) -> float:
    """A counter of this process's metrics registry (the workers above run in this process)."""
    return REGISTRY.get_sample_value(name) or 0.0


async def test_defect_16_a_commit_whose_merge_is_refused_finally_is_parked_and_its_batch_aborted(
    idle: Services,
) -> None:
    s = idle
    txn = await txn_with_data(s)
    failed_before = sample("pravega_controller_transactions_commit_failed_total")
    committed_before = sample("pravega_controller_transactions_committed_total")
    assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
    await run_queues(s, runners(s, frozenset({"merge"})))

    [row] = await parked(s)
    assert row.kind is RequestKind.COMMIT_TXNS
    # The batch that failed for good counts as Pravega's commit_failed, and never as committed.
    assert sample("pravega_controller_transactions_commit_failed_total") - failed_before == 1
    assert sample("pravega_controller_transactions_committed_total") == committed_before
    assert "refuses to merge" in (row.last_error or "")
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
    assert (await s.txn_store.get_committing(SC, ST)).batch is None
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE
    assert await s.txn_store.list_active(SC, ST) == []
    for parent in (0, 1):
        assert await length(s, parent) == 0, "nothing of the abandoned batch reached the stream"
        with pytest.raises(Exception, match="not"):
            await s.segment_store.get_segment_info(txn_segment(txn, parent))
    # The caller's later questions have consistent answers.
    assert await s.transactions.commit(SC, ST, txn) is Outcome.FAILURE
    assert await s.transactions.abort(SC, ST, txn) is Outcome.SUCCESS
    await assert_sealable_and_deletable(s)


async def test_defect_16_a_seal_waiting_on_a_commit_that_fails_finally_completes(idle: Services) -> None:
    s = idle
    txn = await txn_with_data(s)
    assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
    # The seal is queued behind the COMMITTING transaction, whose commit is refused for good.
    sealed = await answered_promptly(
        s.lifecycle.sealing.seal_stream(SC, ST), s, runners(s, frozenset({"merge"}))
    )
    assert sealed is UpdateOutcome.SUCCESS
    assert (await s.stream_store.get_state(SC, ST)).value is StreamState.SEALED
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
    assert len(await parked(s)) == 1
    deleted = await answered_promptly(s.lifecycle.deletion.delete_stream(SC, ST), s, runners(s))
    assert deleted is DeleteStreamOutcome.SUCCESS


async def test_defect_16_the_commit_rollback_is_idempotent_and_spares_later_transactions(
    idle: Services,
) -> None:
    s = idle
    first = await txn_with_data(s)
    await s.transactions.commit(SC, ST, first)
    by = runners(s, frozenset({"merge"}))
    await run_queues(s, by)
    assert len(await parked(s)) == 1
    later = await txn_with_data(s)
    await s.transactions.commit(SC, ST, later)
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    handler = CommitTxnsHandler(deps, s.requests)
    [request] = await parked(s)
    await handler.rollback(request)  # again, after the park: nothing left to roll back
    assert await s.transactions.state(SC, ST, first) is TxnStatus.ABORTED
    assert await s.transactions.state(SC, ST, later) is TxnStatus.COMMITTING
    # The later commit has its own request, which runs once merges are accepted again.
    await run_queues(s, runners(s))
    assert await s.transactions.state(SC, ST, later) is TxnStatus.COMMITTED
    assert await length(s, 0) == 5


async def test_defect_16_an_abort_the_segment_store_refuses_is_parked_and_the_transaction_aborted(
    idle: Services,
) -> None:
    s = idle
    txn = await txn_with_data(s)
    failed_before = sample("pravega_controller_transactions_abort_failed_total")
    aborted_before = sample("pravega_controller_transactions_aborted_total")
    assert await s.transactions.abort(SC, ST, txn) is Outcome.SUCCESS
    await run_queues(s, runners(s, frozenset({"abort"})))
    [row] = await parked(s)
    assert row.kind is RequestKind.ABORT_TXN
    assert sample("pravega_controller_transactions_abort_failed_total") - failed_before == 1
    assert sample("pravega_controller_transactions_aborted_total") == aborted_before
    assert "refuses to drop" in (row.last_error or "")
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
    assert await s.txn_store.list_active(SC, ST) == []
    assert await s.transactions.abort(SC, ST, txn) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, txn) is Outcome.FAILURE
    await assert_sealable_and_deletable(s)


async def test_defect_16_commit_runners_park_after_the_configured_failure_count(db_url: str) -> None:
    """The wired commit dispatcher takes request_max_failures from the settings (it kept its
    own 50, so an unexpected failure was retried for minutes)."""
    async with running_controller(db_url, request_max_failures=2) as s:
        await s.scopes.create_scope(SC)
        await s.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(2)))
        txn = await txn_with_data(s)
        calls = 0

        async def broken(*_args: object, **_kwargs: object) -> int:
            nonlocal calls
            calls += 1
            raise RuntimeError("injected: an unexpected failure")

        s.segment_store.merge_transaction_segments = broken  # type: ignore[method-assign]
        assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
        deadline = time.monotonic() + 15
        while not await parked(s):
            assert time.monotonic() < deadline, f"the commit was not parked ({calls} merge calls)"
            await asyncio.sleep(0.05)
        [row] = await parked(s)
        assert row.failures == 1, "parked on its second unexpected failure"
        assert await s.transactions.state(SC, ST, txn) is TxnStatus.ABORTED
        assert (await s.stream_store.get_state(SC, ST)).value is StreamState.ACTIVE
