"""The typed database wrapper (app/store/db.py): each driver failure, provoked for real against
PostgreSQL, comes out of a query, a transaction block's commit or an acquire as the domain's
error; domain errors raised inside a transaction block come out untouched, and roll it back."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.domain.errors import AlreadyExists, InvalidInput, NotFound, StoreUnavailable, WriteConflict
from app.store.db import PgDatabase, PgSession, connect
from app.store.errors import CHANGED, EXISTS, SLOW, UNAVAILABLE
from app.store.pool import asyncpg_dsn, create_pool

UNREACHABLE = "postgresql://pgcontroller@127.0.0.1:1/x"

_SCHEMA = """
CREATE TABLE probe_parent (id int PRIMARY KEY, v int NOT NULL DEFAULT 0);
CREATE TABLE probe_child (id int PRIMARY KEY, parent int NOT NULL REFERENCES probe_parent (id));
CREATE TABLE probe_deferred (
    id int UNIQUE DEFERRABLE INITIALLY DEFERRED,
    parent int REFERENCES probe_parent (id) DEFERRABLE INITIALLY DEFERRED
);
INSERT INTO probe_parent (id) VALUES (1), (2);
"""


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[PgDatabase]:
    pool = await create_pool(db_url, min_size=1, max_size=4)
    try:
        await pool.execute(_SCHEMA)
        yield pool
    finally:
        await pool.close()


async def test_the_pool_runs_without_jit(db: PgDatabase) -> None:
    # A statement the planner misprices on a long history would otherwise compile for seconds.
    assert await db.fetchval("SHOW jit") == "off"


async def test_rows_read_by_name_by_position_and_with_get(db: PgDatabase) -> None:
    row = await db.fetchrow("SELECT 7 AS seven, 'x' AS ex")
    assert row is not None
    assert (row["seven"], row[0], row.get("ex"), row.get("absent", "d")) == (7, 7, "x", "d")
    assert list(row.keys()) == ["seven", "ex"] and list(row) == [7, "x"]


async def test_a_unique_violation_is_already_exists_with_the_servers_detail_kept_on_the_cause(
    db: PgDatabase,
) -> None:
    with pytest.raises(AlreadyExists, match=f"^{re.escape(EXISTS)}") as raised:
        await db.execute("INSERT INTO probe_parent (id) VALUES (1)")
    assert isinstance(raised.value.__cause__, asyncpg.UniqueViolationError)
    assert "Key (id)=(1) already exists" in str(raised.value.__cause__.detail)
    assert str(raised.value) == EXISTS  # the driver's text is in a note for the log, not here
    assert any("UniqueViolationError" in note for note in raised.value.__notes__)


async def test_a_foreign_key_violation_is_a_write_conflict(db: PgDatabase) -> None:
    with pytest.raises(WriteConflict, match=f"^{re.escape(CHANGED)}") as raised:
        await db.execute("INSERT INTO probe_child (id, parent) VALUES (1, 99)")
    assert isinstance(raised.value.__cause__, asyncpg.ForeignKeyViolationError)


async def test_a_serialization_failure_is_a_write_conflict_and_rolls_the_block_back(db: PgDatabase) -> None:
    with pytest.raises(WriteConflict, match=f"^{re.escape(CHANGED)}") as raised:
        async with db.transaction() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await conn.execute("UPDATE probe_parent SET v = 10 WHERE id = 2")
            assert await conn.fetchval("SELECT v FROM probe_parent WHERE id = 1") == 0  # the snapshot
            await db.execute("UPDATE probe_parent SET v = v + 1 WHERE id = 1")  # commits meanwhile
            await conn.execute("UPDATE probe_parent SET v = v + 1 WHERE id = 1")
    assert isinstance(raised.value.__cause__, asyncpg.SerializationError)
    assert await db.fetchval("SELECT v FROM probe_parent WHERE id = 2") == 0


async def test_a_deadlock_is_a_write_conflict(db: PgDatabase) -> None:
    first_locked, second_locked = asyncio.Event(), asyncio.Event()

    async def lock(mine: int, theirs: int, locked: asyncio.Event, other: asyncio.Event) -> None:
        async with db.transaction() as conn:
            await conn.execute("SET LOCAL deadlock_timeout = '20ms'")
            await conn.execute("SELECT 1 FROM probe_parent WHERE id = $1 FOR UPDATE", mine)
            locked.set()
            await other.wait()
            await conn.execute("SELECT 1 FROM probe_parent WHERE id = $1 FOR UPDATE", theirs)

    results = await asyncio.gather(
        lock(1, 2, first_locked, second_locked),
        lock(2, 1, second_locked, first_locked),
        return_exceptions=True,
    )
    failures = [r for r in results if r is not None]
    assert len(failures) == 1, results  # the server picks one victim; the other goes on
    assert isinstance(failures[0], WriteConflict), failures
    assert isinstance(failures[0].__cause__, asyncpg.DeadlockDetectedError)


async def test_a_statement_timeout_is_store_unavailable(db: PgDatabase) -> None:
    with pytest.raises(StoreUnavailable, match=f"^{re.escape(SLOW)}") as raised:
        async with db.transaction() as conn:
            await conn.execute("SET LOCAL statement_timeout = '20ms'")
            await conn.execute("SELECT pg_sleep(5)")
    assert isinstance(raised.value.__cause__, asyncpg.QueryCanceledError)
    assert await db.fetchval("SELECT 1") == 1  # the pool's connection is usable again


async def test_a_query_beyond_the_command_timeout_is_store_unavailable(db_url: str) -> None:
    db = await create_pool(db_url, min_size=1, max_size=1, command_timeout=0.05)
    try:
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(SLOW)}") as raised:
            await db.fetchval("SELECT pg_sleep(5)")
        assert isinstance(raised.value.__cause__, TimeoutError)
    finally:
        await db.close()


async def test_a_command_timeout_inside_a_block_is_the_blocks_error_not_its_rollbacks(db_url: str) -> None:
    """The query given up on closes its connection (app/store/uncancelled.py), so the block's
    rollback fails there: the error the block ends with is still the timeout's."""
    db = await create_pool(db_url, min_size=1, max_size=1, command_timeout=0.05)
    try:
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(SLOW)}") as raised:
            async with db.transaction() as conn:
                await conn.fetchval("SELECT pg_sleep(5)")
        assert isinstance(raised.value.__cause__, TimeoutError)
        assert await db.fetchval("SELECT 1") == 1  # on a new connection
    finally:
        await db.close()


@pytest.mark.parametrize("block", ["transaction", "acquire", "call"])
async def test_a_task_cancelled_in_a_query_ends_cancelled_and_the_pool_goes_on(
    db: PgDatabase, block: str
) -> None:
    """A cancellation must stay one through the block's exit on the closed connection: turned into
    an outage, a loop that retries outages never ended when cancelled (the storage writer did so,
    hanging the test that stopped it)."""
    started = asyncio.Event()

    async def query() -> None:
        if block == "call":
            started.set()
            await db.fetchval("SELECT pg_sleep(5)")
            return
        async with db.transaction() if block == "transaction" else db.acquire() as conn:
            started.set()
            await conn.fetchval("SELECT pg_sleep(5)")

    task = asyncio.create_task(query())
    await started.wait()
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.fetchval("SELECT 1") == 1


async def test_a_connection_ended_by_the_server_is_store_unavailable(db: PgDatabase) -> None:
    with pytest.raises(StoreUnavailable, match=f"^{re.escape(UNAVAILABLE)}"):
        async with db.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            assert await db.fetchval("SELECT pg_terminate_backend($1)", pid) is True
            await conn.fetchval("SELECT 1")
    assert await db.fetchval("SELECT 1") == 1  # the pool replaces the lost connection


async def test_a_closed_pool_is_store_unavailable_for_queries_acquires_and_blocks(db_url: str) -> None:
    db = await create_pool(db_url, min_size=1, max_size=1)
    await db.close()
    with pytest.raises(StoreUnavailable):
        await db.fetchval("SELECT 1")
    with pytest.raises(StoreUnavailable):
        async with db.acquire():
            pytest.fail("acquired from a closed pool")
    with pytest.raises(StoreUnavailable):
        async with db.transaction():
            pytest.fail("a transaction on a closed pool")


async def test_a_server_that_cannot_be_reached_is_store_unavailable_when_acquiring() -> None:
    # With no connection opened up front, the first one is opened by the acquire.
    db = await create_pool(UNREACHABLE, min_size=0, max_size=1)
    try:
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(UNAVAILABLE)}"):
            async with db.acquire():
                pytest.fail("acquired a connection to nowhere")
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(UNAVAILABLE)}"):
            await db.fetchval("SELECT 1")
    finally:
        await db.close()
    with pytest.raises(StoreUnavailable, match=f"^{re.escape(UNAVAILABLE)}"):
        await connect(asyncpg_dsn(UNREACHABLE))


async def test_domain_errors_pass_through_a_block_untouched_and_roll_it_back(db: PgDatabase) -> None:
    error = NotFound("raised by store code")
    with pytest.raises(NotFound) as raised:
        async with db.transaction() as conn:
            await conn.execute("INSERT INTO probe_parent (id) VALUES (3)")
            raise error
    assert raised.value is error and raised.value.__cause__ is None
    assert await db.fetchval("SELECT count(*) FROM probe_parent WHERE id = 3") == 0


async def test_other_errors_pass_through_a_block_untouched(db: PgDatabase) -> None:
    with pytest.raises(ZeroDivisionError):
        async with db.transaction() as conn:
            await conn.execute("INSERT INTO probe_parent (id) VALUES (3)")
            _ = 1 // 0
    assert await db.fetchval("SELECT count(*) FROM probe_parent WHERE id = 3") == 0


async def test_a_nested_block_is_a_savepoint(db: PgDatabase) -> None:
    async with db.transaction() as conn:
        await conn.execute("INSERT INTO probe_parent (id) VALUES (3)")
        with pytest.raises(AlreadyExists):
            async with conn.transaction():
                await conn.execute("INSERT INTO probe_parent (id) VALUES (4)")
                await conn.execute("INSERT INTO probe_parent (id) VALUES (4)")
        await conn.execute("INSERT INTO probe_parent (id) VALUES (5)")
    ids = [r["id"] for r in await db.fetch("SELECT id FROM probe_parent ORDER BY id")]
    assert ids == [1, 2, 3, 5]


async def test_a_unique_violation_at_commit_is_already_exists(db: PgDatabase) -> None:
    body_done = False
    with pytest.raises(AlreadyExists, match=f"^{re.escape(EXISTS)}"):
        async with db.transaction() as conn:
            await conn.execute("INSERT INTO probe_deferred (id) VALUES (1), (1)")
            body_done = True
    assert body_done, "the deferred constraint is checked at COMMIT, after the block's statements"
    assert await db.fetchval("SELECT count(*) FROM probe_deferred") == 0


async def test_a_foreign_key_violation_at_commit_is_a_write_conflict(db: PgDatabase) -> None:
    body_done = False
    with pytest.raises(WriteConflict, match=f"^{re.escape(CHANGED)}"):
        async with db.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO probe_deferred (id, parent) VALUES (1, 99)")
            body_done = True
    assert body_done
    assert await db.fetchval("SELECT count(*) FROM probe_deferred") == 0


async def test_a_session_ended_by_the_server_reports_itself_and_is_store_unavailable(db_url: str) -> None:
    session = await connect(asyncpg_dsn(db_url))
    ended: list[PgSession] = []
    session.add_termination_listener(ended.append)
    try:
        pid = await session.fetchval("SELECT pg_backend_pid()")
        other = await connect(asyncpg_dsn(db_url))
        try:
            assert await other.fetchval("SELECT pg_terminate_backend($1)", pid) is True
        finally:
            await other.close()
        # Idle, the session learns of its end from the server (a query racing that notice can
        # fail inside the driver before the driver runs its termination listeners).
        for _ in range(500):
            if ended:
                break
            await asyncio.sleep(0.01)
        assert ended == [session] and session.is_closed()
        with pytest.raises(StoreUnavailable, match=f"^{re.escape(UNAVAILABLE)}"):
            await session.fetchval("SELECT 1")
    finally:
        await session.close()


async def test_defect_5_a_value_the_server_refuses_is_invalid_input_not_an_outage(db: PgDatabase) -> None:
    """SQLSTATE class 22 is the caller's input (NUL in text, a number out of range, a string too
    long): InvalidInput with a message in the caller's terms, the driver's text on the cause."""
    with pytest.raises(InvalidInput, match="cannot be stored") as raised:
        await db.fetchval("SELECT $1::text", "a\x00b")
    assert isinstance(raised.value.__cause__, asyncpg.CharacterNotInRepertoireError)
    with pytest.raises(InvalidInput, match="number is out of the range") as raised:
        await db.fetchval("SELECT $1::int * 1000000", 1_000_000)
    assert isinstance(raised.value.__cause__, asyncpg.NumericValueOutOfRangeError)
    with pytest.raises(InvalidInput, match="too long") as raised:
        async with db.transaction() as conn:
            await conn.execute("CREATE TEMP TABLE probe_short (v varchar(2)) ON COMMIT DROP")
            await conn.execute("INSERT INTO probe_short (v) VALUES ($1)", "abc")
    assert isinstance(raised.value.__cause__, asyncpg.StringDataRightTruncationError)


async def test_defect_5_an_argument_the_driver_cannot_encode_is_invalid_input(db: PgDatabase) -> None:
    with pytest.raises(InvalidInput, match="cannot be stored") as raised:
        await db.fetchval("SELECT $1::bigint", 2**63)
    assert "query argument" in str(raised.value.__cause__)
    assert "query argument" not in str(raised.value)
