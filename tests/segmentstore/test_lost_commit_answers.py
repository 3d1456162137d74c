"""A table write whose COMMIT loses its answer is answered by what became of it.

The Rust client's reader group completes a segment with a conditional table update; when the
store closed the connection after the update had committed (PostgreSQL crashed, or terminated
the backend, between writing the commit and answering it), the client sent it again, was told
its key version was wrong, re-derived the update from a table that no longer had the segment
assigned, and panicked ("should have assigned this segment to reader", seen in the chaos test at
a PostgreSQL crash). The window is made here on purpose, on a cluster of the test's own:
PostgreSQL waits for a synchronous standby that does not exist after the commit is durable, and
the backend is terminated while it waits (PostgreSQL's words: "the transaction has already
committed locally"). The store's answer must then be the update's own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.clock import SystemClock
from app.domain.hosts import HostAddress
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.connections import next_request_id
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.store.commit_outcome import known_transaction, outcome, settled_outcome
from app.store.db import PgDatabase, connect, open_pool
from app.store.migrate import upgrade_to_head
from app.store.segment_data import PgSegmentStorage
from app.testing.segment_store import OneHost
from tests.support.db import throwaway_cluster

TABLE = "scope/_RGgroup/0.#epoch.0"
KEY = b"assigned/reader-0"
WAIT_S = 30.0
# Writes sent until one's COMMIT is caught waiting for the standby.
ATTEMPTS = 20


@dataclass
class Store:
    url: str
    pool: PgDatabase
    admin: asyncpg.Connection
    address: HostAddress
    client: WireSegmentStore

    async def request(self, command: wc.Command) -> wc.Command:
        """On a connection of its own: a closed connection is an error here, not a retry."""
        async with self.client.pool.dedicated(self.address) as connection:
            return await connection.request(command, WAIT_S)


@asynccontextmanager
async def _store() -> AsyncIterator[Store]:
    with throwaway_cluster() as cluster:
        await asyncio.to_thread(upgrade_to_head, cluster.url())
        # The suite's clusters commit asynchronously, which waits for no standby.
        pool = await open_pool(
            cluster.url(), min_size=1, max_size=4, server_settings={"synchronous_commit": "on"}
        )
        admin = await asyncpg.connect(cluster.admin_url())
        server = await SegmentStoreServer.start(PgSegmentStorage(pool, SystemClock()), "127.0.0.1", 0)
        address = HostAddress(*server.address)
        client = WireSegmentStore(OneHost(address), request_timeout_s=WAIT_S)
        try:
            await client.create_table_segment(TABLE, 0, 0)
            yield Store(cluster.url(), pool, admin, address, client)
        finally:
            await admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            await admin.execute("SELECT pg_reload_conf()")
            await client.close()
            await server.close()
            await admin.close()
            await pool.close()


async def _put(store: Store, value: bytes, version: int) -> wc.Command:
    entry = (wc.TableKey(KEY, version), wc.TableValue(value))
    return await store.request(wc.UpdateTableEntries(next_request_id(), TABLE, "", (entry,)))


async def _read(store: Store) -> tuple[bytes, int]:
    reply = await store.request(wc.ReadTable(next_request_id(), TABLE, "", (wc.TableKey(KEY, -1),)))
    assert isinstance(reply, wc.TableRead), reply
    ((key, value),) = reply.entries
    return value.data, key.key_version


async def _terminated_while_waiting(admin: asyncpg.Connection, write: asyncio.Task[wc.Command]) -> bool:
    """Terminates the backends whose COMMIT is durable here and waits for a standby (the store's
    write, and any of its other writes caught there too): True; False if `write` was answered
    first (its backend had not yet taken the new setting: a reload reaches each backend a moment
    after pg_reload_conf returns)."""
    deadline = time.monotonic() + WAIT_S
    while not write.done():
        pids = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        if pids:
            for row in pids:
                await admin.execute("SELECT pg_terminate_backend($1)", row["pid"])
            return True
        assert time.monotonic() < deadline, "no COMMIT ever waited for the standby"
        await asyncio.sleep(0.01)
    return False


async def _lose_the_answer(
    store: Store,
    command: Callable[[], Coroutine[Any, Any, wc.Command]],
    undo: Callable[[], Awaitable[None]] | None = None,
) -> wc.Command:
    """`command()` sent until one's COMMIT waits for the standby and is cut off there: its answer.
    An attempt answered before the setting took is undone (`undo`) before the next."""
    await _with_commits_waiting_for_a_standby(store)
    try:
        for _ in range(ATTEMPTS):
            write = asyncio.create_task(command())
            if await _terminated_while_waiting(store.admin, write):
                await _with_commits_answered(store)
                return await asyncio.wait_for(write, WAIT_S)
            await write  # committed before the setting reached its backend: once more
            if undo is not None:  # with commits answered, or it would wait for the standby too
                await _with_commits_answered(store)
                await undo()
                await _with_commits_waiting_for_a_standby(store)
        raise AssertionError(f"no COMMIT of {ATTEMPTS} waited for the standby")
    finally:
        await _with_commits_answered(store)


async def _with_commits_waiting_for_a_standby(store: Store) -> None:
    await store.admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'a_standby_never_there'")
    await store.admin.execute("SELECT pg_reload_conf()")


async def _with_commits_answered(store: Store) -> None:
    await store.admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
    await store.admin.execute("SELECT pg_reload_conf()")


async def test_a_conditional_update_that_committed_without_its_answer_is_answered_with_its_versions() -> None:
    async with _store() as store:
        first = await _put(store, b"segments 0 and 1", wc.TABLE_KEY_NOT_EXISTS)
        assert isinstance(first, wc.TableEntriesUpdated), first
        (version,) = first.versions

        versions = [version]

        async def update() -> wc.Command:
            # Conditional on the version it last saw (an attempt answered before the standby
            # setting took moves it on).
            answer = await _put(store, b"segment 1", versions[-1])
            if isinstance(answer, wc.TableEntriesUpdated):
                versions.append(answer.versions[0])
            return answer

        # Before the fix the store closed the connection ("unavailable, retry"), and the retry
        # of this very update was TableKeyBadVersion.
        answer = await _lose_the_answer(store, update)
        assert isinstance(answer, wc.TableEntriesUpdated), answer
        assert answer.versions[0] > version
        assert await _read(store) == (b"segment 1", answer.versions[0])


async def test_a_conditional_removal_that_committed_without_its_answer_is_answered_as_removed() -> None:
    async with _store() as store:
        first = await _put(store, b"segment 0", wc.TABLE_KEY_NOT_EXISTS)
        assert isinstance(first, wc.TableEntriesUpdated), first

        versions = [first.versions[0]]

        async def removal() -> wc.Command:
            key = wc.TableKey(KEY, versions[-1])
            return await store.request(wc.RemoveTableKeys(next_request_id(), TABLE, "", (key,)))

        async def put_back() -> None:
            again = await _put(store, b"segment 0", wc.TABLE_KEY_NOT_EXISTS)
            assert isinstance(again, wc.TableEntriesUpdated), again
            versions.append(again.versions[0])

        answer = await _lose_the_answer(store, removal, put_back)
        assert isinstance(answer, wc.TableKeysRemoved), answer
        assert (await _read(store))[1] == wc.TABLE_KEY_NOT_EXISTS


async def test_the_outcome_of_a_transaction_is_what_became_of_it() -> None:
    """The lookup itself, against PostgreSQL: rolled back is aborted, open is in progress (and
    stays so until the wait ends), committed is committed."""
    async with _store() as store:
        conn = await connect(store.url)
        try:
            async with conn.transaction():
                committed = await known_transaction(conn)
            await conn.execute("BEGIN")
            still_open = await known_transaction(conn)
            assert await outcome(store.pool, committed) == "committed"
            assert await outcome(store.pool, still_open) == "in progress"
            started = time.monotonic()
            assert await settled_outcome(store.pool, still_open, 0.5) == "in progress"
            assert time.monotonic() - started >= 0.5
            await conn.execute("ROLLBACK")
            assert await outcome(store.pool, still_open) == "aborted"
        finally:
            await conn.close()


async def test_a_transaction_is_looked_up_only_on_the_server_it_ran_on() -> None:
    """After a failover the pool asks the new primary, where the old primary's id for this
    transaction is another's: its answer would say committed of a write the rewind removes. Two
    clusters stand for the two primaries here; their transaction ids overlap as theirs do."""
    async with _store() as store, _store() as elsewhere:
        conn = await connect(elsewhere.url)
        try:
            async with conn.transaction():
                there = await known_transaction(conn)
        finally:
            await conn.close()
        assert await outcome(elsewhere.pool, there) == "committed"
        # The same id, committed here too, is not this transaction's outcome.
        for _ in range(100_000):  # each call takes an id: on until this cluster's pass `there`'s
            if int(await store.pool.fetchval("SELECT txid_current()")) > there.xid:
                break
        else:
            raise AssertionError(f"this cluster's transaction ids never passed {there.xid}")
        assert await store.pool.fetchval("SELECT txid_status($1)", there.xid) == "committed"
        assert await outcome(store.pool, there) is None
        assert await settled_outcome(store.pool, there, 0.3) is None
