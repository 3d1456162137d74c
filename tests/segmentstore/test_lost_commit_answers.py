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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from app.clock import SystemClock
from app.domain.hosts import HostAddress
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.connections import next_request_id
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.store.commit_outcome import outcome, settled_outcome
from app.store.db import PgDatabase, connect, open_pool
from app.store.migrate import upgrade_to_head
from app.store.segment_data import PgSegmentStorage
from app.testing.segment_store import OneHost
from tests.support.db import throwaway_cluster

TABLE = "scope/_RGgroup/0.#epoch.0"
KEY = b"assigned/reader-0"
WAIT_S = 30.0


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


async def _terminate_a_commit_waiting_for_its_standby(admin: asyncpg.Connection) -> int:
    """Terminates the backends whose COMMIT is durable here and waits for a standby (the store's
    write, and any of its other writes caught there too); how many."""
    deadline = time.monotonic() + WAIT_S
    while True:
        pids = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        if pids:
            for row in pids:
                await admin.execute("SELECT pg_terminate_backend($1)", row["pid"])
            return len(pids)
        assert time.monotonic() < deadline, "no COMMIT ever waited for the standby"
        await asyncio.sleep(0.02)


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

        await _with_commits_waiting_for_a_standby(store)
        update = asyncio.create_task(_put(store, b"segment 1", version))
        assert await _terminate_a_commit_waiting_for_its_standby(store.admin) >= 1
        await _with_commits_answered(store)

        # Before the fix the store closed the connection ("unavailable, retry"), and the retry
        # of this very update was TableKeyBadVersion.
        answer = await asyncio.wait_for(update, WAIT_S)
        assert isinstance(answer, wc.TableEntriesUpdated), answer
        assert answer.versions[0] > version
        assert await _read(store) == (b"segment 1", answer.versions[0])


async def test_a_conditional_removal_that_committed_without_its_answer_is_answered_as_removed() -> None:
    async with _store() as store:
        first = await _put(store, b"segment 0", wc.TABLE_KEY_NOT_EXISTS)
        assert isinstance(first, wc.TableEntriesUpdated), first

        await _with_commits_waiting_for_a_standby(store)
        key = wc.TableKey(KEY, first.versions[0])
        removal = asyncio.create_task(store.request(wc.RemoveTableKeys(next_request_id(), TABLE, "", (key,))))
        assert await _terminate_a_commit_waiting_for_its_standby(store.admin) >= 1
        await _with_commits_answered(store)

        answer = await asyncio.wait_for(removal, WAIT_S)
        assert isinstance(answer, wc.TableKeysRemoved), answer
        assert (await _read(store))[1] == wc.TABLE_KEY_NOT_EXISTS


async def test_the_outcome_of_a_transaction_is_what_became_of_it() -> None:
    """The lookup itself, against PostgreSQL: rolled back is aborted, open is in progress (and
    stays so until the wait ends), committed is committed."""
    async with _store() as store:
        conn = await connect(store.url)
        try:
            async with conn.transaction():
                committed = int(await conn.fetchval("SELECT txid_current()"))
            await conn.execute("BEGIN")
            open_xid = int(await conn.fetchval("SELECT txid_current()"))
            assert await outcome(store.pool, committed) == "committed"
            assert await outcome(store.pool, open_xid) == "in progress"
            started = time.monotonic()
            assert await settled_outcome(store.pool, open_xid, 0.5) == "in progress"
            assert time.monotonic() - started >= 0.5
            await conn.execute("ROLLBACK")
            assert await outcome(store.pool, open_xid) == "aborted"
        finally:
            await conn.close()
