"""Transactions across a SIGKILL of the `serve` process.

* A process killed in the middle of a commit batch (segments merged, batch not yet recorded
  as complete) is restarted and completes that batch exactly once.
* A transaction whose lease runs out while no controller runs is aborted by the next one.

The test drives the API in-process on the same database (no workers run in it), while the
served process does the background work, exactly as two controllers would share the work.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from app.domain.ids import qualified_segment_name, transaction_segment_name
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import Outcome, TxnId, TxnStatus
from app.testing.controller import Services, running_controller
from app.testing.served import ServedProcess, start_served

SC, ST = "crash", "txns"


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        await services.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(2)))
        yield services


async def _until(probe: Callable[[], Awaitable[object]], expected: object, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if value == expected:
            return
        if loop.time() > deadline:
            raise AssertionError(f"stayed {value!r}, expected {expected!r}")
        await asyncio.sleep(0.05)


async def _kill(served: ServedProcess) -> None:
    served.process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(served.process.wait(), 10) == -signal.SIGKILL


async def _states(api: Services, txns: list[TxnId]) -> list[TxnStatus]:
    return [await api.transactions.state(SC, ST, t) for t in txns]


async def test_sigkill_mid_commit_batch_then_restart_commits_exactly_once(
    api: Services, db_url: str, tmp_path: Path
) -> None:
    txns = [(await api.transactions.create(SC, ST, 30_000)).txn for _ in range(3)]
    for size, txn in enumerate(txns, start=1):
        for segment in (0, 1):
            name = transaction_segment_name(qualified_segment_name(SC, ST, segment), txn.high, txn.low)
            await api.segment_store.append(name, 10 * size)
    for txn in txns:
        await api.transactions.commit(SC, ST, txn)

    parked = await start_served(
        tmp_path, "--db-url", db_url, env={"PGCONTROLLER_FAILPOINTS": "commit.before_complete"}
    )

    async def parked_at_failpoint() -> bool:
        return "failpoint commit.before_complete reached" in parked.log()

    await _until(parked_at_failpoint, True)
    # Parked after the merges, before the batch is recorded: data merged, outcome not written.
    for segment in (0, 1):
        info = await api.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))
        assert info.length == 60
    assert await _states(api, txns) == [TxnStatus.COMMITTING] * 3
    assert (await api.txn_store.get_committing(SC, ST)).batch is not None
    await _kill(parked)

    restarted = await start_served(tmp_path, "--db-url", db_url)
    try:
        await _until(lambda: _states(api, txns), [TxnStatus.COMMITTED] * 3)
    finally:
        assert await restarted.stop() == 0, restarted.log()
    for segment in (0, 1):
        info = await api.segment_store.get_segment_info(qualified_segment_name(SC, ST, segment))
        assert info.length == 60, "each transaction was merged exactly once"
    completed = await api.transactions.list_completed(SC, ST)
    assert sorted(c.txn for c in completed) == sorted(txns)
    assert (await api.txn_store.get_committing(SC, ST)).batch is None
    assert (await api.stream_store.get_state(SC, ST)).value.value == "ACTIVE"
    conn = await asyncpg.connect(db_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM requests") == 0
        assert await conn.fetchval("SELECT count(*) FROM transactions") == 0
    finally:
        await conn.close()


async def test_a_lease_that_expires_while_no_controller_runs_is_aborted_after_restart(
    api: Services, db_url: str, tmp_path: Path
) -> None:
    first = await start_served(tmp_path, "--db-url", db_url, "--txn-min-lease", "100")
    txn = (await api.transactions.create(SC, ST, 1_500)).txn
    await _kill(first)
    await asyncio.sleep(2.0)
    assert await api.transactions.state(SC, ST, txn) is TxnStatus.OPEN, "nobody ran to time it out"

    restarted = await start_served(tmp_path, "--db-url", db_url, "--txn-min-lease", "100")
    try:
        await _until(lambda: api.transactions.state(SC, ST, txn), TxnStatus.ABORTED)
    finally:
        assert await restarted.stop() == 0, restarted.log()
    assert await api.transactions.commit(SC, ST, txn) is Outcome.FAILURE
