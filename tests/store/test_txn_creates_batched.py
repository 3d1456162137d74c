"""Transactions created in one loop turn are one statement (PgTxnStore.create_txn), and so are the
reads each creation makes after its segments exist (get_txn); each caller still gets its own id,
its own lease, and its own error when its own stream is missing or sealed, never another's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.domain.errors import IllegalState, NotFound
from app.domain.records import StreamState
from app.domain.txns import TxnId, TxnStatus
from app.ports import CreatedTxn
from app.services.transactions import CreatedTransaction
from app.store import queries
from app.store.txns import PgTxnStore
from app.testing.controller import Services
from tests.store.test_segment_data_batched import Counting
from tests.support.txn_batches import controller_with_streams

SC = "creates"
BATCHED = "-- create_txn for many callers"
ALONE = "-- The id's low half comes from the global counter"
READS = "-- get_txn for many callers"
MAX_EXEC = 10**15


def created(answer: CreatedTxn | BaseException) -> CreatedTxn:
    assert isinstance(answer, CreatedTxn), answer
    return answer


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with controller_with_streams(db_url, SC, ("a", "b", "sealed"), segments=2) as services:
        state = await services.stream_store.get_state(SC, "sealed")
        await services.stream_store.set_state(SC, "sealed", StreamState.SEALED, state.version)
        yield services


async def test_creates_of_one_turn_are_one_statement_with_each_callers_own_outcome(
    services: Services,
) -> None:
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    now = services.clock.now_ms()

    answers = await asyncio.gather(
        store.create_txn(SC, "a", None, now, 10_000, MAX_EXEC),
        store.create_txn(SC, "nowhere", None, now, 10_000, MAX_EXEC),  # no such stream
        store.create_txn(SC, "a", None, now, 20_000, MAX_EXEC),
        store.create_txn(SC, "sealed", None, now, 10_000, MAX_EXEC),  # refuses new transactions
        store.create_txn(SC, "b", None, now, 30_000, MAX_EXEC),
        return_exceptions=True,
    )

    assert len(counting.statements) == 1 and counting.statements[0].startswith(BATCHED)
    assert isinstance(answers[1], NotFound) and "creates/nowhere" in str(answers[1])
    assert isinstance(answers[3], IllegalState) and "SEALED" in str(answers[3])
    made = [created(answers[0]), created(answers[2]), created(answers[4])]
    assert len({answer.txn for answer in made}) == 3
    stream_ids = await services.pool.fetch("SELECT name, id FROM streams WHERE scope = $1", SC)
    ids = {row["name"]: row["id"] for row in stream_ids}
    assert [answer.stream_id for answer in made] == [ids["a"], ids["a"], ids["b"]]
    for stream, answer, lease in zip(("a", "a", "b"), made, (10_000, 20_000, 30_000), strict=True):
        assert answer.epoch == 0 and answer.txn.high == 0
        active = (await services.txn_store.get_txn(SC, stream, answer.txn)).active
        assert active is not None
        value = active.value
        assert (value.status, value.lease_ms, value.lease_expiry) == (TxnStatus.OPEN, lease, now + lease)
    assert await services.pool.fetchval("SELECT count(*) FROM transactions") == 3


async def test_a_lone_create_runs_alone(services: Services) -> None:
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    created = await store.create_txn(SC, "a", None, services.clock.now_ms(), 10_000, MAX_EXEC)
    assert created.txn.low > 0
    assert len(counting.statements) == 1 and counting.statements[0].startswith(ALONE)


async def test_reads_of_one_turn_are_one_statement_with_each_callers_own_outcome(services: Services) -> None:
    now = services.clock.now_ms()
    txn = (await services.txn_store.create_txn(SC, "a", None, now, 10_000, MAX_EXEC)).txn
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    found, unknown, missing = await asyncio.gather(
        store.get_txn(SC, "a", txn),
        store.get_txn(SC, "b", TxnId(0, 999_999)),
        store.get_txn(SC, "nowhere", txn),
        return_exceptions=True,
    )
    assert len(counting.statements) == 1 and counting.statements[0].startswith(READS)
    assert not isinstance(found, BaseException) and found.status == TxnStatus.OPEN
    assert not isinstance(unknown, BaseException) and unknown.active is None and unknown.completed is None
    assert isinstance(missing, NotFound)


@pytest.mark.parametrize("plan_mode", ["force_generic_plan", "force_custom_plan"])
async def test_the_batched_read_probes_both_tables_by_their_whole_key(
    services: Services, plan_mode: str
) -> None:
    """On the statistics of a freshly filled completed_txns (3,000 rows of one stream, not yet
    analyzed), each read is a primary-key lookup in transactions and in completed_txns, not a
    walk over the stream's completed transactions filtered by id (which made every creation's
    read slower as a run of transactions went on: 1.3 ms, then 2.2, then 2.8 a call)."""
    stream_id = await services.pool.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = 'a'", SC)
    await services.pool.execute(
        "INSERT INTO completed_txns (stream_id, txn_high, txn_low, status, completion_time)"
        " SELECT $1, 0, n, 'COMMITTED', n FROM generate_series(1, 3000) AS n",
        stream_id,
    )
    columns = [[SC] * 3, ["a"] * 3, [0] * 3, [2998, 2999, 3000]]
    async with services.resources.pool.acquire() as conn:
        await conn.execute(f"SET plan_cache_mode = {plan_mode}")
        try:
            plan = "\n".join(
                row[0] for row in await conn.fetch("EXPLAIN " + queries.load("txns")["get_txns"], *columns)
            )
        finally:
            await conn.execute("RESET plan_cache_mode")
    lines = plan.splitlines()
    probes = [
        i for i, line in enumerate(lines) if " on transactions " in line or " on completed_txns " in line
    ]
    assert len(probes) == 2, plan
    for i in probes:
        assert "Index" in lines[i] and "pkey" in lines[i], plan
        assert "txn_high" in lines[i + 1] and "txn_low" in lines[i + 1], plan
    assert not any("Filter" in line and "txn_low" in line for line in lines), plan
    store = PgTxnStore(services.pool)
    reads = await asyncio.gather(*(store.get_txn(SC, "a", TxnId(0, low)) for low in (2999, 3001)))
    assert [None if r.completed is None else r.completed.completion_time for r in reads] == [2999, None]


async def test_concurrent_service_creates_with_a_bad_caller(services: Services) -> None:
    """Through the service, segments and all: the bad callers fail alone, the rest are created
    with their segments on the store."""
    outcomes = await asyncio.gather(
        *(services.transactions.create(SC, "a", 10_000) for _ in range(4)),
        services.transactions.create(SC, "sealed", 10_000),
        services.transactions.create(SC, "nowhere", 10_000),
        return_exceptions=True,
    )
    assert isinstance(outcomes[4], IllegalState)
    assert isinstance(outcomes[5], NotFound)
    good = [outcome for outcome in outcomes[:4] if isinstance(outcome, CreatedTransaction)]
    assert len({outcome.txn for outcome in good}) == 4
    for outcome in good:
        assert [segment.id for segment in outcome.segments] == [0, 1]
        assert await services.transactions.state(SC, "a", outcome.txn) == TxnStatus.OPEN
