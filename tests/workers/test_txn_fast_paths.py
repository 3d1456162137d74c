"""The transaction hot path's reads that were dropped: a commit or abort of an OPEN transaction
is its one write (no read first), a creation reads no active epoch (the insert reads it), and an
in-place commit batch reads its epoch once. The answers are those of the read-then-write path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.domain.ids import segment_id
from app.domain.records import StreamState
from app.domain.requests import Processor
from app.domain.txns import Outcome, PingStatus, TxnStatus
from app.testing.controller import Services, running_controller
from tests.workers.test_txn_workflows import (
    LEASE,
    SC,
    ST,
    assert_settled,
    make_stream,
    run_pending,
    scale_now,
    write,
)


@pytest.fixture
async def s(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        yield services


def spy(monkeypatch: pytest.MonkeyPatch, target: Any, method: str) -> list[tuple[Any, ...]]:
    """Records the calls of `target.method` (which still runs)."""
    calls: list[tuple[Any, ...]] = []
    real: Callable[..., Any] = getattr(target, method)

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(target, method, recorded)
    return calls


async def test_commit_and_abort_of_an_open_transaction_read_nothing_first(
    s: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_stream(s)
    committed = (await s.transactions.create(SC, ST, LEASE)).txn
    aborted = (await s.transactions.create(SC, ST, LEASE)).txn
    # A ping moved the version on: the one-statement move takes whatever version is there.
    assert await s.transactions.ping(SC, ST, committed, LEASE) in (PingStatus.OK, PingStatus.DISCONNECTED)
    reads = spy(monkeypatch, s.txn_store, "get_txn")
    assert await s.transactions.commit(SC, ST, committed) is Outcome.SUCCESS
    assert await s.transactions.abort(SC, ST, aborted) is Outcome.SUCCESS
    assert reads == []
    assert await s.transactions.state(SC, ST, committed) is TxnStatus.COMMITTING
    assert await s.transactions.state(SC, ST, aborted) is TxnStatus.ABORTING
    # Anything but OPEN is read and decided as before.
    reads.clear()
    assert await s.transactions.commit(SC, ST, committed) is Outcome.SUCCESS
    assert await s.transactions.commit(SC, ST, aborted) is Outcome.FAILURE
    assert await s.transactions.abort(SC, ST, committed) is Outcome.FAILURE
    assert len(reads) == 3


async def test_creation_reads_no_active_epoch_and_takes_the_current_reference(
    s: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_stream(s, 1)
    before = (await s.transactions.create(SC, ST, LEASE)).txn
    await scale_now(s, [0], [(0.0, 1.0)], 0)
    # A state change drops the stream's cached view, as every commit batch does twice.
    state = await s.stream_store.get_state(SC, ST)
    await s.stream_store.set_state(SC, ST, StreamState.COMMITTING_TXN, state.version)
    actives = spy(monkeypatch, s.stream_store, "get_active_epoch")
    created = await s.transactions.create(SC, ST, LEASE)
    assert actives == []
    assert (before.epoch, created.txn.epoch) == (0, 1)
    assert [seg.id for seg in created.segments] == [segment_id(1, 1)]


async def test_an_in_place_commit_batch_reads_its_epoch_once(
    s: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_stream(s, 2)
    txn = (await s.transactions.create(SC, ST, LEASE)).txn
    await write(s, txn, 0, 10)
    assert await s.transactions.commit(SC, ST, txn) is Outcome.SUCCESS
    epochs = spy(monkeypatch, s.stream_store, "get_epoch")
    assert await run_pending(s, Processor.COMMITS) == (1, 0)
    assert epochs == []
    assert await s.transactions.state(SC, ST, txn) is TxnStatus.COMMITTED
    await assert_settled(s)
