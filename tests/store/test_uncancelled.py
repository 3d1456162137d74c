"""A query given up on is dropped with its connection, never cancelled (app/store/uncancelled.py).

On a cluster of the test's own whose COMMITs wait for a synchronous standby that is never there
(a primary whose standby was promoted away from it): a write the store gave up on, by its command
timeout or by cancelling the task awaiting it, stays invisible to every other session, and the
store never answers with it, until the standby requirement is lifted (then it is durable, and
seen). A cancel would have ended the wait and shown it at once (asyncpg's default: these tests
failed with it).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest

from app.clock import SystemClock
from app.domain.errors import StoreUnavailable
from app.segmentstore.storage import AppendRequest
from app.store.db import PgDatabase, open_pool
from app.store.migrate import upgrade_to_head
from app.store.segment_data import PgSegmentStorage
from tests.support.db import throwaway_cluster

GIVE_UP_S = 1.0
SEGMENT = "uncancelled/events/0.#epoch.0"
WRITER = uuid.uuid4().int


@dataclass
class Cluster:
    pool: PgDatabase
    admin: asyncpg.Connection

    async def commits_wait_for_a_standby(self, waiting: bool) -> None:
        if waiting:
            await self.admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'a_standby_never_there'")
        else:
            await self.admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await self.admin.execute("SELECT pg_reload_conf()")
        # A backend takes a reload at its next command after the signal has reached it.
        await asyncio.sleep(0.3)

    async def waiting_for_the_standby(self) -> int:
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        return int(await self.admin.fetchval(waiting))

    async def until_no_backend_waits(self) -> None:
        deadline = time.monotonic() + 10
        while await self.waiting_for_the_standby():
            assert time.monotonic() < deadline, "a COMMIT still waits for the standby once none is required"
            await asyncio.sleep(0.05)


@asynccontextmanager
async def _cluster() -> AsyncIterator[Cluster]:
    with throwaway_cluster() as embedded:
        await asyncio.to_thread(upgrade_to_head, embedded.url())
        # The suite's clusters commit asynchronously, which waits for no standby.
        pool = await open_pool(
            embedded.url(),
            min_size=1,
            max_size=4,
            command_timeout=GIVE_UP_S,
            server_settings={"synchronous_commit": "on"},
        )
        admin = await asyncpg.connect(embedded.admin_url())
        cluster = Cluster(pool, admin)
        try:
            await admin.execute("CREATE TABLE given_up (id int)")
            await admin.execute("GRANT INSERT, SELECT ON given_up TO PUBLIC")
            yield cluster
        finally:
            await cluster.commits_wait_for_a_standby(False)
            await admin.close()
            await pool.close()


async def _insert_given_up_by_timeout(pool: PgDatabase) -> None:
    await pool.execute("INSERT INTO given_up VALUES (1)")


async def _insert_given_up_by_cancellation(pool: PgDatabase) -> None:
    # Longer than this and the command timeout would give it up first.
    async with asyncio.timeout(GIVE_UP_S / 2):
        await pool.execute("INSERT INTO given_up VALUES (1)")


@pytest.mark.parametrize(
    "give_up", [_insert_given_up_by_timeout, _insert_given_up_by_cancellation], ids=["timeout", "cancelled"]
)
async def test_a_commit_given_up_on_while_it_waits_for_a_standby_stays_invisible(
    give_up: Callable[[PgDatabase], Awaitable[None]],
) -> None:
    async with _cluster() as cluster:
        await cluster.commits_wait_for_a_standby(True)
        with pytest.raises((StoreUnavailable, TimeoutError)):
            await give_up(cluster.pool)
        await asyncio.sleep(0.3)  # what a cancel would have needed to reach the server
        assert await cluster.admin.fetchval("SELECT count(*) FROM given_up") == 0
        assert await cluster.waiting_for_the_standby() == 1
        # The pool goes on, on a connection of its own (a read waits for no standby).
        assert await cluster.pool.fetchval("SELECT count(*) FROM given_up") == 0

        await cluster.commits_wait_for_a_standby(False)
        await cluster.until_no_backend_waits()
        assert await cluster.admin.fetchval("SELECT count(*) FROM given_up") == 1


async def test_the_store_never_answers_with_an_append_it_gave_up_on() -> None:
    """The loss this prevents: SetupAppend answered the writer's last event number from an append
    that timed out, so the client never sent that event again."""
    async with _cluster() as cluster:
        storage = PgSegmentStorage(cluster.pool, SystemClock())
        await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
        stored = await storage.append(AppendRequest(SEGMENT, WRITER, b"first", 1, 1))
        assert stored.length == 5

        await cluster.commits_wait_for_a_standby(True)
        with pytest.raises(StoreUnavailable):
            await storage.append(AppendRequest(SEGMENT, WRITER, b"second", 2, 1))
        await asyncio.sleep(0.3)
        assert await cluster.waiting_for_the_standby() == 1
        length = "SELECT length FROM embedded_segments WHERE name = $1"
        assert await cluster.admin.fetchval(length, SEGMENT) == 5
        # Its answer waits for the append's transaction to end (it holds the segment's row), so
        # it is given up on too; never the second append's number.
        try:
            told = await storage.writer_event_number(SEGMENT, WRITER)
        except StoreUnavailable:
            told = None
        assert told in (None, 1)

        await cluster.commits_wait_for_a_standby(False)
        await cluster.until_no_backend_waits()
        assert await storage.writer_event_number(SEGMENT, WRITER) == 2
        assert await cluster.admin.fetchval(length, SEGMENT) == 11
        # The writer, told 2 now, does not resend; had it resent, the append is a duplicate.
        again = await storage.append(AppendRequest(SEGMENT, WRITER, b"second", 2, 1))
        assert again.duplicate and again.length == 11
