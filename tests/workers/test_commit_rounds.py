"""The commit worker's rounds: after a batch it knows the emptied committing record (the version
its completion wrote), so the next round starts from it instead of reading the record again; a
version changed behind its back costs one WriteConflict and a fresh read, never a lost commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.domain.requests import Processor
from app.domain.txns import TxnId, TxnStatus
from app.ports import CommittingRecord
from app.testing.controller import Services
from tests.workers.test_txn_workflows import (
    ALL_BUCKETS,
    LEASE,
    SC,
    ST,
    commit_runner,
    length,
    make_stream,
    s,
    write,
)
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps

__all__ = ["s"]  # the fixture, shared with the workflow tests


class Recording:
    """The transaction store, with its committing-record reads counted and, when asked, the
    record's version moved on behind the worker's back after each completed batch."""

    def __init__(self, services: Services, *, bump_after_batch: bool = False) -> None:
        self._services = services
        self._store = services.txn_store
        self._bump = bump_after_batch
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_committing(self, scope: str, name: str) -> CommittingRecord:
        self.reads += 1
        return await self._store.get_committing(scope, name)

    async def complete_commit_batch(self, scope: str, name: str, txns: Sequence[TxnId], *args: Any) -> int:
        version = await self._store.complete_commit_batch(scope, name, txns, *args)
        if self._bump:
            await self._services.resources.pool.execute("UPDATE committing_txns SET version = version + 1")
        return version


async def _commit_five_in_batches_of_two(s: Services, store: Recording) -> list[TxnId]:
    await make_stream(s)
    txns = [(await s.transactions.create(SC, ST, LEASE)).txn for _ in range(5)]
    for txn in txns:
        await write(s, txn, 0, 1)
        await s.transactions.commit(SC, ST, txn)
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, store)  # type: ignore[arg-type]
    handler = CommitTxnsHandler(deps, s.requests, batch_size=2)
    runner = commit_runner(s, handler)
    pending = await s.requests.pending(Processor.COMMITS, ALL_BUCKETS, [], 10)
    assert await runner.attempt(pending[0]) is None
    return txns


async def test_three_batches_read_the_committing_record_once(s: Services) -> None:
    store = Recording(s)
    txns = await _commit_five_in_batches_of_two(s, store)
    assert all([await s.transactions.state(SC, ST, t) is TxnStatus.COMMITTED for t in txns])
    assert store.reads == 1


async def test_a_record_changed_behind_the_worker_is_read_again(s: Services) -> None:
    store = Recording(s, bump_after_batch=True)
    txns = await _commit_five_in_batches_of_two(s, store)
    assert all([await s.transactions.state(SC, ST, t) is TxnStatus.COMMITTED for t in txns])
    assert await length(s, 0) == (5, False)
    # The first read, then one after each of the first two batches, whose next batch's start
    # met the stale version; after the third nothing is pending, so nothing is written.
    assert store.reads == 3
