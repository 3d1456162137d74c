"""PgContainerMapStore and the SharedContainerMap locator against a real database.

Hosts: idempotent registration, deregistration at the version read. The map: replaced whole
or not at all, conditional on every version read, with forced two-writer races for both
versioned tables (registered in tests/store/test_versioned_races.py as covered here). The
locator: a map written through one process reaches another within a second, by notification
or by polling, and getURI answers from it; a lost database leaves the last map answering.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from app.clock import SystemClock
from app.domain.containers import container_for_segment
from app.domain.errors import NotFound, StoreUnavailable, WriteConflict
from app.domain.hosts import HostAddress
from app.domain.ids import qualified_segment_name
from app.segmentstore.hosts import SharedContainerMap
from app.services.containers import ContainerMapService
from app.services.segments import SegmentQueries
from app.store.cache import RecordCache
from app.store.containers import PgContainerMapStore
from app.store.notifications import PgListener
from app.store.pool import create_pool
from app.store.streams import PgStreamStore
from tests.store.test_versioned_races import race

A = HostAddress("10.0.0.1", 12345)
B = HostAddress("10.0.0.2", 12345)
C = HostAddress("10.0.0.3", 12345)
STATIC = (HostAddress("static.local", 12345),)
COUNT = 4


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Any]:
    pool = await create_pool(db_url, min_size=1, max_size=6)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def store(pool: Any) -> PgContainerMapStore:
    return PgContainerMapStore(pool)


async def stored(store: PgContainerMapStore) -> dict[int, tuple[HostAddress, int]]:
    return {c: (v.value, v.version) for c, v in (await store.read_container_map()).items()}


async def versions(store: PgContainerMapStore) -> dict[int, int]:
    return {c: v.version for c, v in (await store.read_container_map()).items()}


# --- hosts -------------------------------------------------------------------------------------


async def test_registration_is_idempotent_and_keeps_the_first_time(store: PgContainerMapStore) -> None:
    assert await store.register_host(B, 2_000) is True
    assert await store.register_host(A, 1_000) is True
    assert await store.register_host(B, 3_000) is False

    hosts = await store.list_hosts()
    assert [(h.address, h.registered_at, h.version) for h in hosts] == [(A, 1_000, 0), (B, 2_000, 0)]
    assert (await store.get_host(B)).registered_at == 2_000


async def test_same_host_on_another_port_is_another_segment_store(store: PgContainerMapStore) -> None:
    await store.register_host(A, 1)
    await store.register_host(HostAddress(A.host, 9999), 1)
    assert [h.address.port for h in await store.list_hosts()] == [9999, 12345]


async def test_unknown_host_is_not_found(store: PgContainerMapStore) -> None:
    with pytest.raises(NotFound, match="not registered"):
        await store.get_host(A)
    with pytest.raises(NotFound):
        await store.deregister_host(A, 0)


async def test_deregistration_is_conditional_on_the_version(pool: Any, store: PgContainerMapStore) -> None:
    await store.register_host(A, 1)
    # Nothing updates a registration today; a moved version stands for any future writer.
    await pool.execute("UPDATE segment_store_hosts SET version = version + 1")
    with pytest.raises(WriteConflict):
        await store.deregister_host(A, 0)
    assert [h.address for h in await store.list_hosts()] == [A]

    await store.deregister_host(A, 1)
    assert await store.list_hosts() == []


async def test_two_registrations_race_one_creates(pool: Any, store: PgContainerMapStore) -> None:
    results = await race(
        SimpleNamespace(pool=pool),  # type: ignore[arg-type]
        "segment_store_hosts",
        [lambda: store.register_host(A, 1), lambda: store.register_host(A, 2)],
    )
    assert sorted(results) == [False, True]  # type: ignore[type-var]
    assert len(await store.list_hosts()) == 1


async def test_two_deregistrations_race_one_wins_the_other_finds_nothing(
    pool: Any, store: PgContainerMapStore
) -> None:
    await store.register_host(A, 1)
    version = (await store.get_host(A)).version

    async def deregister() -> int:
        await store.deregister_host(A, version)
        return 1

    results = await race(SimpleNamespace(pool=pool), "segment_store_hosts", [deregister, deregister])  # type: ignore[arg-type]
    assert sum(r == 1 for r in results) == 1
    assert sum(isinstance(r, NotFound) for r in results) == 1, results
    assert await store.list_hosts() == []


# --- the container map -------------------------------------------------------------------------


async def test_first_write_inserts_every_container_at_version_zero(store: PgContainerMapStore) -> None:
    assert await store.read_container_map() == {}
    await store.replace_container_map({0: A, 1: B, 2: A, 3: B}, {})
    assert await stored(store) == {0: (A, 0), 1: (B, 0), 2: (A, 0), 3: (B, 0)}


async def test_only_rows_whose_host_changes_get_a_new_version(store: PgContainerMapStore) -> None:
    await store.replace_container_map({0: A, 1: B, 2: A, 3: B}, {})
    await store.replace_container_map({0: A, 1: B, 2: C, 3: B}, await versions(store))
    assert await stored(store) == {0: (A, 0), 1: (B, 0), 2: (C, 1), 3: (B, 0)}


async def test_a_stale_version_on_an_unchanged_row_still_fails_the_whole_write(
    store: PgContainerMapStore,
) -> None:
    await store.replace_container_map({0: A, 1: B}, {})
    read = await versions(store)
    await store.replace_container_map({0: A, 1: C}, read)  # another writer moves container 1

    # This writer changes only container 0, but read container 1 before the other write.
    with pytest.raises(WriteConflict):
        await store.replace_container_map({0: B, 1: B}, read)
    assert await stored(store) == {0: (A, 0), 1: (C, 1)}


async def test_rows_beyond_the_assignment_are_deleted(store: PgContainerMapStore) -> None:
    await store.replace_container_map({0: A, 1: B, 2: A, 3: B, 4: A, 5: B}, {})
    await store.replace_container_map({0: A, 1: B, 2: A, 3: B}, await versions(store))
    assert set(await stored(store)) == {0, 1, 2, 3}
    await store.replace_container_map({}, await versions(store))
    assert await store.read_container_map() == {}


async def test_a_row_the_writer_never_read_fails_the_write(pool: Any, store: PgContainerMapStore) -> None:
    await store.replace_container_map({0: A}, {})
    read = await versions(store)
    await pool.execute("INSERT INTO container_map (container, host, port) VALUES (7, 'x', 1)")
    with pytest.raises(WriteConflict):
        await store.replace_container_map({0: B}, read)
    # Nothing of the failed write landed, not even the row it could change.
    assert await stored(store) == {0: (A, 0), 7: (HostAddress("x", 1), 0)}


async def test_inserting_a_container_someone_else_inserted_conflicts(store: PgContainerMapStore) -> None:
    await store.replace_container_map({0: A}, {})
    with pytest.raises(WriteConflict):
        await store.replace_container_map({0: B, 1: B}, {})
    assert await stored(store) == {0: (A, 0)}


_VARIANTS = ({0: A, 1: B, 2: A, 3: B}, {0: C, 1: C, 2: B, 3: A})


@pytest.mark.parametrize("from_empty", [True, False], ids=["insert", "update"])
async def test_two_writers_of_the_map_race_exactly_one_wins(
    pool: Any, store: PgContainerMapStore, from_empty: bool
) -> None:
    if not from_empty:
        await store.replace_container_map({0: B, 1: A, 2: B, 3: A}, {})
    read = await versions(store)

    def writer(variant: int) -> Callable[[], Awaitable[int]]:
        async def write() -> int:
            await store.replace_container_map(_VARIANTS[variant], read)
            return variant

        return write

    results = await race(SimpleNamespace(pool=pool), "container_map", [writer(0), writer(1)])  # type: ignore[arg-type]
    winners = [r for r in results if isinstance(r, int)]
    losers = [r for r in results if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    current = await stored(store)
    assert {c: host for c, (host, _) in current.items()} == _VARIANTS[winners[0]]
    # Rows the winner left on their host keep their version; moved rows get the next one.
    before = {} if from_empty else {0: B, 1: A, 2: B, 3: A}
    expected_versions = {c: int(c in before and before[c] != h) for c, h in _VARIANTS[winners[0]].items()}
    assert {c: v for c, (_, v) in current.items()} == expected_versions


async def test_a_closed_pool_is_store_unavailable(db_url: str) -> None:
    closed = await create_pool(db_url, min_size=1, max_size=1)
    await closed.close()
    with pytest.raises(StoreUnavailable):
        await PgContainerMapStore(closed).read_container_map()


# --- the SharedContainerMap locator -----------------------------------------------------------

NAME = qualified_segment_name("scope", "stream", 0)


@contextlib.asynccontextmanager
async def running_locator(
    db_url: str, pool: Any, *, notified: bool, poll_s: float
) -> AsyncIterator[SharedContainerMap]:
    locator = SharedContainerMap(COUNT, STATIC, PgContainerMapStore(pool), poll_s=poll_s)
    tasks = [asyncio.create_task(locator.run())]
    listener = PgListener(db_url, RecordCache())
    if notified:
        listener.on_cluster_change(locator.changed)
        listener.on_connected(locator.wake)
        tasks.append(asyncio.create_task(listener.run()))
        await asyncio.wait_for(listener.connected.wait(), 10)
    try:
        await asyncio.wait_for(locator.loaded.wait(), 10)
        yield locator
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def eventually(check: Callable[[], bool], within_s: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not check():
        assert loop.time() - start < within_s, f"not within {within_s}s"
        await asyncio.sleep(0.01)
    return loop.time() - start


def service_over(pool: Any) -> ContainerMapService:
    static = list(STATIC)
    return ContainerMapService(PgContainerMapStore(pool), SystemClock(), COUNT, static)


@pytest.mark.parametrize(("notified", "poll_s"), [(True, 30.0), (False, 0.2)], ids=["notified", "polled"])
async def test_a_map_written_elsewhere_reaches_the_locator_within_a_second(
    db_url: str, pool: Any, notified: bool, poll_s: float
) -> None:
    # The writer is another "process": its own pool, as the leader would have.
    leader_pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        async with running_locator(db_url, pool, notified=notified, poll_s=poll_s) as locator:
            queries = SegmentQueries(PgStreamStore(pool), locator)
            container = container_for_segment(NAME, COUNT)
            assert locator.endpoint_for_segment(NAME) == STATIC[0]
            assert queries.uri("scope", "stream", 0) == STATIC[0]

            await service_over(leader_pool).rebalance([A, B])
            first = A if container % 2 == 0 else B  # the first map is uniform over sorted hosts
            await eventually(lambda: locator.endpoint_for_segment(NAME) == first, 1.0)
            assert queries.uri("scope", "stream", 0) == first
            assert {c: (h.host, h.port) for c, h in locator.assignment().items()} == {
                c: ((A if c % 2 == 0 else B).host, 12345) for c in range(COUNT)
            }

            # Everything leaves: the map empties and getURI falls back to the static host.
            await service_over(leader_pool).rebalance([])
            await eventually(lambda: locator.endpoint_for_segment(NAME) == STATIC[0], 1.0)
    finally:
        await leader_pool.close()


async def test_two_locators_on_one_database_agree_after_a_change(db_url: str, pool: Any) -> None:
    other_pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        async with (
            running_locator(db_url, pool, notified=True, poll_s=30.0) as one,
            running_locator(db_url, other_pool, notified=True, poll_s=30.0) as two,
        ):
            await service_over(pool).rebalance([C])
            only_c = dict.fromkeys(range(COUNT), HostAddress(C.host, C.port))
            await eventually(lambda: one.assignment() == two.assignment() == only_c, 1.0)
    finally:
        await other_pool.close()


async def test_a_lost_database_leaves_the_last_map_answering(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    await service_over(pool).rebalance([A])
    locator = SharedContainerMap(COUNT, STATIC, PgContainerMapStore(pool), poll_s=0.05)
    await locator.refresh()
    assert locator.endpoint_for_segment(NAME) == A
    await pool.close()

    with pytest.raises(StoreUnavailable):
        await locator.refresh()
    task = asyncio.create_task(locator.run())
    try:
        await asyncio.sleep(0.3)  # several failed polls
        assert not task.done()
        assert locator.endpoint_for_segment(NAME) == A
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_metadata_segments_beyond_the_count_still_get_a_host() -> None:
    static = (HostAddress("s1", 1), HostAddress("s2", 2))
    locator = SharedContainerMap(COUNT, static, PgContainerMapStore(None))
    # _system/containers/metadata_<N> names its container directly, unchecked against the count.
    assert locator.endpoint_for_segment("_system/containers/metadata_9") == static[1]
    assert locator.endpoint_for_segment("_system/containers/metadata_2") == static[0]
