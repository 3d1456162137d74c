"""Connections lent again without a round through asyncpg's pool (app/store/lending.py), against
a real PostgreSQL: a clean give-back is lent again as it is; anything not clean (a transaction left
open, a connection lost while idle) goes through the pool's cleanup; a
borrower waiting on the pool is handed the next connection given back; idle ones are returned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.domain.errors import StoreUnavailable
from app.store.db import NotLent, PgDatabase, connect
from app.store.lending import ConnectionLender
from app.store.pool import asyncpg_dsn, create_pool

PID = "SELECT pg_backend_pid()"


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[PgDatabase]:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        await pool.execute("CREATE TABLE lent_rows (id int)")
        yield pool
    finally:
        await pool.close()


async def test_a_connection_given_back_clean_is_lent_again_and_counted_idle(db: PgDatabase) -> None:
    first = await db.fetchval(PID)
    assert db.pool_use()[1] >= 1
    assert [await db.fetchval(PID) for _ in range(5)] == [first] * 5
    async with db.transaction() as conn:
        assert await conn.fetchval(PID) == first


async def test_a_transaction_left_open_goes_back_through_the_pool_and_is_rolled_back(db: PgDatabase) -> None:
    async with db.acquire() as conn:
        await conn.execute("BEGIN")
        await conn.execute("INSERT INTO lent_rows VALUES (1)")
    assert await db.fetchval("SELECT count(*) FROM lent_rows") == 0
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("INSERT INTO lent_rows VALUES (2)")
    assert await db.fetchval("SELECT count(*) FROM lent_rows") == 1


async def test_a_query_given_up_on_and_caught_in_the_block_leaves_the_pool_lending_working_connections(
    db: PgDatabase,
) -> None:
    async with db.acquire() as conn:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await conn.fetchval("SELECT pg_sleep(5)")
    # The connection was closed, not the sleep cancelled (app/store/uncancelled.py): never lent again.
    async with asyncio.timeout(5):
        assert await db.fetchval("SELECT 1") == 1
        assert await db.fetchval("SELECT 2") == 2


async def test_a_connection_lost_while_idle_is_replaced(db: PgDatabase, db_url: str) -> None:
    lost = await db.fetchval(PID)
    other = await connect(asyncpg_dsn(db_url))
    try:
        assert await other.fetchval("SELECT pg_terminate_backend($1)", lost) is True
    finally:
        await other.close()
    await asyncio.sleep(0.3)  # the loop reads the server's goodbye and asyncpg marks it closed
    assert await db.fetchval(PID) != lost


async def test_a_borrower_waiting_on_the_pool_gets_the_connection_given_back(db: PgDatabase) -> None:
    release = asyncio.Event()

    async def hold() -> int:
        async with db.acquire() as conn:
            await release.wait()
            return int(await conn.fetchval(PID))

    holders = [asyncio.create_task(hold()) for _ in range(2)]  # the pool's two connections
    await asyncio.sleep(0.2)
    waiting = asyncio.create_task(db.fetchval(PID))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    release.set()
    async with asyncio.timeout(5):
        pids = await asyncio.gather(*holders)
        assert await waiting in pids


async def test_a_connection_idle_past_the_limit_goes_back_to_the_pool(db_url: str) -> None:
    pool = await asyncpg.create_pool(asyncpg_dsn(db_url), min_size=0, max_size=2)
    now = [0.0]
    lender = ConnectionLender(pool, idle_s=10.0, clock=lambda: now[0])
    try:
        first, second = await lender.lend(), await lender.lend()
        await lender.give_back(first, clean=True)
        await lender.give_back(second, clean=True)
        assert (lender.idle(), pool.get_idle_size()) == (2, 0)
        now[0] = 5.0
        again = await lender.lend()  # the newest: `second`
        assert again is second
        now[0] = 11.0
        await lender.give_back(again, clean=True)  # `first` has been idle 11 s: back to the pool
        assert (lender.idle(), pool.get_idle_size()) == (1, 1)
        await lender.give_back(await lender.lend(), clean=False)
        assert (lender.idle(), pool.get_idle_size()) == (0, 2)
    finally:
        await lender.close()
        await pool.close()


async def test_closing_hands_the_idle_connections_back_and_lends_no_more(db_url: str) -> None:
    db = await create_pool(db_url, min_size=1, max_size=2)
    await db.fetchval("SELECT 1")
    async with asyncio.timeout(10):
        await db.close()  # would wait for ever on connections the lender kept


async def test_only_a_connection_that_could_not_be_opened_is_not_lent(db: PgDatabase, db_url: str) -> None:
    # NotLent means nothing was sent, so the segment store may try again (app/store/patient_db.py);
    # a connection lost once the statement went out must not say so.
    nowhere = await create_pool("postgresql://pgcontroller@127.0.0.1:1/x", min_size=0, max_size=1)
    try:
        with pytest.raises(NotLent):
            await nowhere.fetchval("SELECT 1")
        with pytest.raises(NotLent):
            async with nowhere.acquire():
                pytest.fail("lent a connection to nowhere")
    finally:
        await nowhere.close()
    with pytest.raises(StoreUnavailable) as lost:
        async with db.acquire() as conn:
            pid = await conn.fetchval(PID)
            other = await connect(asyncpg_dsn(db_url))
            try:
                await other.fetchval("SELECT pg_terminate_backend($1)", pid)
            finally:
                await other.close()
            await conn.fetchval("SELECT 1")
    assert not isinstance(lost.value, NotLent)
