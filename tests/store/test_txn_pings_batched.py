"""Pings asked for in one loop turn are one statement (PgTxnStore.extend_open_lease), and each
ping still gets the answer it would have had alone: an open transaction within its bounds is
extended, a lease over the maximum, a missing or a committing transaction is not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.domain.txns import TxnId
from app.store import queries
from app.store.txns import PgTxnStore
from app.testing.controller import Services
from tests.store.test_segment_data_batched import Counting
from tests.support.txn_batches import controller_with_streams, open_txn

SC = "pings"
MAX_LEASE_MS = 120_000
BATCHED = "-- extend_open_lease for many pings"
ALONE = "-- A ping's common case in one statement"


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with controller_with_streams(db_url, SC, ("a", "b")) as services:
        yield services


async def _open(services: Services, stream: str) -> TxnId:
    return await open_txn(services, SC, stream)


async def _lease(services: Services, stream: str, txn: TxnId) -> tuple[int, int]:
    active = (await services.txn_store.get_txn(SC, stream, txn)).active
    assert active is not None
    return active.value.lease_ms, active.value.lease_expiry


async def test_pings_of_one_turn_are_one_statement_with_each_pings_own_answer(services: Services) -> None:
    first, second, other = await _open(services, "a"), await _open(services, "a"), await _open(services, "b")
    committing = await _open(services, "a")
    assert (await services.transactions.commit(SC, "a", committing)).name == "SUCCESS"
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    now = services.clock.now_ms()

    answers = await asyncio.gather(
        store.extend_open_lease(SC, "a", first, 20_000, now, MAX_LEASE_MS),
        store.extend_open_lease(SC, "a", second, MAX_LEASE_MS + 1, now, MAX_LEASE_MS),  # over the maximum
        store.extend_open_lease(SC, "b", other, 30_000, now, MAX_LEASE_MS),
        store.extend_open_lease(SC, "a", TxnId(7, 7), 20_000, now, MAX_LEASE_MS),  # no such transaction
        store.extend_open_lease(SC, "a", committing, 20_000, now, MAX_LEASE_MS),  # no longer OPEN
        store.extend_open_lease("nowhere", "a", first, 20_000, now, MAX_LEASE_MS),  # no such stream
    )

    assert answers == [True, False, True, False, False, False]
    assert len(counting.statements) == 1 and counting.statements[0].startswith(BATCHED)
    assert await _lease(services, "a", first) == (20_000, now + 20_000)
    assert await _lease(services, "b", other) == (30_000, now + 30_000)
    assert (await _lease(services, "a", second))[0] == 10_000  # untouched


async def test_the_same_transaction_pinged_many_times_in_a_turn_is_extended_for_all(
    services: Services,
) -> None:
    txn = await _open(services, "a")
    store = PgTxnStore(services.resources.pool)
    now = services.clock.now_ms()
    answers = await asyncio.gather(
        *(store.extend_open_lease(SC, "a", txn, 20_000, now, MAX_LEASE_MS) for _ in range(5))
    )
    # PostgreSQL updates a row once per statement, however many source rows match it: the pings
    # that lost are answered by the lease the winner set, which reaches as far as each asked
    # (before, four of the five answered False and raced each other on the service's slow path).
    assert answers == [True] * 5
    assert await _lease(services, "a", txn) == (20_000, now + 20_000)


async def test_a_ping_asking_further_than_the_one_that_won_is_not_answered_by_it(services: Services) -> None:
    txn = await _open(services, "a")
    store = PgTxnStore(services.resources.pool)
    now = services.clock.now_ms()
    shorter, longer = await asyncio.gather(
        store.extend_open_lease(SC, "a", txn, 20_000, now, MAX_LEASE_MS),
        store.extend_open_lease(SC, "a", txn, 30_000, now, MAX_LEASE_MS),
    )
    _, expiry = await _lease(services, "a", txn)
    # Whichever won, the shorter ask is reached; the longer one only if it was the one that won
    # (else the service reads the record and pings alone).
    assert shorter is True
    assert longer == (expiry == now + 30_000)


async def test_a_lone_ping_runs_alone(services: Services) -> None:
    txn = await _open(services, "a")
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    assert await store.extend_open_lease(SC, "a", txn, 20_000, services.clock.now_ms(), MAX_LEASE_MS)
    assert len(counting.statements) == 1 and counting.statements[0].startswith(ALONE)


async def test_a_service_ping_that_loses_inside_a_batch_still_answers_ok(services: Services) -> None:
    """Through the service: its slow path answers the ping the batch did not extend."""
    txn = await _open(services, "a")
    sweeper = asyncio.create_task(services.txn_sweeper.run())  # pings need timeouts running
    await asyncio.sleep(0)
    try:
        statuses = await asyncio.gather(*(services.transactions.ping(SC, "a", txn, 20_000) for _ in range(5)))
    finally:
        sweeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sweeper
    assert {status.name for status in statuses} == {"OK"}


async def test_the_batched_statement_probes_transactions_by_their_whole_key(services: Services) -> None:
    """The plan a prepared statement falls back to (generic, as after five runs) on the statistics
    of a freshly filled table: each ping is a primary-key lookup, not a walk over every
    transaction of its stream (which halved the ping rate when it happened)."""
    txns = [await _open(services, "a") for _ in range(20)]
    now = services.clock.now_ms()
    columns = [["pings"] * 3, ["a"] * 3, [t.high for t in txns[:3]], [t.low for t in txns[:3]]]
    columns += [[now] * 3, [20_000] * 3, [MAX_LEASE_MS] * 3]
    async with services.resources.pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            plan = "\n".join(
                row[0]
                for row in await conn.fetch("EXPLAIN " + queries.load("txns")["extend_open_leases"], *columns)
            )
        finally:
            await conn.execute("RESET plan_cache_mode")
    probe = [line for line in plan.splitlines() if "Index Cond" in line and "txn_low" in line]
    assert probe and "stream_id" in probe[0] and "txn_high" in probe[0], plan
