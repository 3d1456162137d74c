"""The record cache: hot reads skip the database while the LISTEN connection is up, a change
committed by another process invalidates them through NOTIFY, and a lost connection makes
every mutable read go to the database until LISTEN is back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.domain.records import ScalingPolicy, SegmentRecord, StreamConfig, StreamState
from app.store.cache import RecordCache, StreamView
from app.store.notifications import PgListener
from app.store.streams import PgStreamStore
from app.testing.controller import Services


class CountingPool:
    """Delegates to a real pool and counts the round trips made through it."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._pool, name)
        if name in ("fetch", "fetchrow", "fetchval", "execute", "acquire"):
            self.calls += 1
        return attr


@contextlib.asynccontextmanager
async def listening_store(
    url: str, pool: Any
) -> AsyncIterator[tuple[PgStreamStore, RecordCache, PgListener]]:
    cache = RecordCache()
    # A first reconnect delay long enough to observe the untrusted window deterministically.
    listener = PgListener(url, cache, heartbeat_s=0.2, first_backoff_s=1.0, max_backoff_s=1.0)
    task = asyncio.create_task(listener.run())
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        yield PgStreamStore(pool, cache), cache, listener
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def eventually(check: Any, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


@pytest.fixture
async def stream(services: Services) -> Services:
    await services.scopes.create_scope("sc")
    await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(2)))
    return services


async def test_warm_hot_reads_make_no_round_trip(stream: Services, db_url: str) -> None:
    counting = CountingPool(stream.pool)
    async with listening_store(db_url, counting) as (store, _cache, _listener):
        await store.get_active_epoch("sc", "s")
        first = counting.calls
        assert first == 1
        for _ in range(10):
            state, epoch = await store.get_active_epoch("sc", "s")
            assert state == StreamState.ACTIVE and epoch.epoch == 0
            assert (await store.get_epoch("sc", "s", 0)).epoch == 0
        assert counting.calls == first


async def test_a_change_by_another_process_invalidates_through_notify(stream: Services, db_url: str) -> None:
    async with listening_store(db_url, stream.pool) as (reader, _cache, _listener):
        assert (await reader.get_active_epoch("sc", "s"))[0] == StreamState.ACTIVE
        # Another process (its own store, no shared cache) seals the stream.
        other = PgStreamStore(stream.pool)
        state = await other.get_state("sc", "s")
        await other.set_state("sc", "s", StreamState.SEALING, state.version)

        async def reader_sees_sealing() -> bool:
            return (await reader.get_active_epoch("sc", "s"))[0] == StreamState.SEALING

        await eventually(reader_sees_sealing)


async def test_a_lost_listen_connection_distrusts_the_cache_until_it_is_back(
    stream: Services, db_url: str
) -> None:
    counting = CountingPool(stream.pool)
    async with listening_store(db_url, counting) as (store, cache, listener):
        await store.get_active_epoch("sc", "s")
        assert cache.trusted
        await stream.pool.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid() AND datname = current_database()"
        )

        async def distrusted() -> bool:
            return not cache.trusted

        await eventually(distrusted)
        for _ in range(3):
            before = counting.calls
            await store.get_active_epoch("sc", "s")
            assert counting.calls == before + 1  # untrusted: every read goes to the database
        assert not cache.trusted

        async def trusted_again() -> bool:
            return cache.trusted and listener.connected.is_set()

        await eventually(trusted_again)
        await store.get_active_epoch("sc", "s")
        warm = counting.calls
        await store.get_active_epoch("sc", "s")
        assert counting.calls == warm


def test_a_read_that_raced_an_invalidation_is_not_kept() -> None:
    cache = RecordCache()
    cache.trust()
    generation = cache.generation
    cache.invalidate_stream(7)  # a NOTIFY arrived while the read was in flight
    cache.remember_view("sc", "s", StreamView(7, StreamState.ACTIVE, 0), generation)
    assert cache.view("sc", "s") is None
    cache.remember_view("sc", "s", StreamView(7, StreamState.ACTIVE, 0), cache.generation)
    assert cache.view("sc", "s") == StreamView(7, StreamState.ACTIVE, 0)
    cache.invalidate_stream(7)
    assert cache.view("sc", "s") is None


def test_an_untrusted_cache_keeps_only_immutable_records() -> None:
    cache = RecordCache()
    cache.remember_view("sc", "s", StreamView(1, StreamState.ACTIVE, 0), cache.generation)
    assert cache.view("sc", "s") is None
    from app.domain.records import EpochRecord

    record = EpochRecord(0, 0, (SegmentRecord(0, 0, 1, 0.0, 1.0),), 1)
    cache.remember_epoch(1, record)
    assert cache.epoch(1, 0) == record
