"""ContainerMapService and the leader's ContainerBalancerDuty over a real database.

The rebalance waits until the host set has been stable for the delay (a fake clock drives
it) unless a host left (then it moves at once), removes hosts whose heartbeats stopped, keeps
the map while the host set is unchanged, builds the first map uniformly, and on
joins and leaves moves as few containers as balance needs; a lost database or a concurrent
writer costs one pass, never the duty.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import asyncpg
import pytest

import pgurl
from app.domain.errors import InvalidInput, NotFound
from app.ports import HostAddress
from app.services.containers import ContainerMapService, RebalanceAction
from app.store.containers import PgContainerMapStore
from app.store.pool import create_pool
from app.testing.clock import ManualClock
from workers.containers import ContainerBalancerDuty, PassOutcome

A = HostAddress("ss-a", 12345)
B = HostAddress("ss-b", 12345)
C = HostAddress("ss-c", 12345)
STATIC = (HostAddress("localhost", 12345),)
DELAY_MS = 10_000


def make_service(pool: Any, clock: ManualClock, count: int = 4) -> ContainerMapService:
    return ContainerMapService(PgContainerMapStore(pool), clock, count, STATIC)


@pytest.fixture
def service(pool: Any, clock: ManualClock) -> ContainerMapService:
    return make_service(pool, clock)


@pytest.fixture
def duty(service: ContainerMapService, clock: ManualClock) -> ContainerBalancerDuty:
    return ContainerBalancerDuty(service, clock, rebalance_delay_s=DELAY_MS / 1000)


async def register(service: ContainerMapService, *hosts: HostAddress) -> None:
    for host in hosts:
        await service.register_host(host.host, host.port)


async def deregister(service: ContainerMapService, *hosts: HostAddress) -> None:
    for host in hosts:
        await service.deregister_host(host.host, host.port)


async def owners(service: ContainerMapService) -> dict[int, HostAddress]:
    return (await service.assignment()).owners


async def settle(duty: ContainerBalancerDuty, clock: ManualClock) -> PassOutcome:
    """A pass that sees the current host set, then one after the delay."""
    assert (await duty.run_once()).outcome in (PassOutcome.WAITING, PassOutcome.KEPT)
    clock.advance(DELAY_MS)
    return (await duty.run_once()).outcome


def spread(assignment: dict[int, HostAddress], hosts: list[HostAddress]) -> int:
    load = Counter(assignment.values())
    return max(load[h] for h in hosts) - min(load[h] for h in hosts)


# --- registration --------------------------------------------------------------------------------


async def test_register_reports_new_then_existing(service: ContainerMapService, clock: ManualClock) -> None:
    registered, created = await service.register_host("ss-a", 12345)
    assert created and registered.address == A and registered.registered_at == clock.now
    clock.advance(5)
    again, created = await service.register_host("ss-a", 12345)
    assert not created and again == registered
    assert [h.address for h in await service.hosts()] == [A]


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("", 1),
        ("a b", 1),
        ("a/b", 1),
        ("x" * 256, 1),
        ("a\x00", 1),
        ("a", 0),
        ("a", 65536),
        ("a", -1),
        ("a", True),
    ],
    ids=["empty", "space", "slash", "long", "control", "port0", "port65536", "negative", "bool"],
)
async def test_bad_hosts_are_invalid_input_and_write_nothing(
    service: ContainerMapService, host: str, port: int
) -> None:
    with pytest.raises(InvalidInput):
        await service.register_host(host, port)
    assert await service.hosts() == []


async def test_deregistering_an_unknown_host_is_not_found(service: ContainerMapService) -> None:
    with pytest.raises(NotFound):
        await service.deregister_host("ss-a", 12345)
    await register(service, A)
    await deregister(service, A)
    with pytest.raises(NotFound):
        await service.deregister_host("ss-a", 12345)


def test_construction_needs_containers_and_static_hosts(pool: Any, clock: ManualClock) -> None:
    with pytest.raises(InvalidInput):
        ContainerMapService(PgContainerMapStore(pool), clock, 0, STATIC)
    with pytest.raises(InvalidInput):
        ContainerMapService(PgContainerMapStore(pool), clock, 4, [])
    with pytest.raises(ValueError):
        ContainerBalancerDuty(make_service(pool, clock), clock, rebalance_delay_s=-1)


# --- the effective map ---------------------------------------------------------------------------


async def test_a_fresh_cluster_answers_from_the_static_hosts(pool: Any, clock: ManualClock) -> None:
    two = (HostAddress("s1", 1), HostAddress("s2", 2))
    service = ContainerMapService(PgContainerMapStore(pool), clock, 5, two)
    assignment = await service.assignment()
    assert assignment.from_static_hosts and assignment.container_count == 5
    assert assignment.owners == {0: two[0], 1: two[1], 2: two[0], 3: two[1], 4: two[0]}


# --- the delay -----------------------------------------------------------------------------------


async def test_the_rebalance_waits_the_delay_from_the_last_change_seen(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B)
    first = await duty.run_once()
    assert first.outcome == PassOutcome.WAITING and first.wait_ms == DELAY_MS
    clock.advance(6_000)
    assert (await duty.run_once()).wait_ms == 4_000

    await register(service, C)  # a change restarts the wait from the moment it is seen
    clock.advance(1_000)
    changed = await duty.run_once()
    assert changed.outcome == PassOutcome.WAITING and changed.wait_ms == DELAY_MS
    clock.advance(DELAY_MS - 1)
    assert (await duty.run_once()).outcome == PassOutcome.WAITING
    assert (await service.assignment()).from_static_hosts

    clock.advance(1)
    done = await duty.run_once()
    assert done.outcome == PassOutcome.REBALANCED and done.hosts == (A, B, C)
    assert await owners(service) == {0: A, 1: B, 2: C, 3: A}


async def test_a_zero_delay_rebalances_on_the_first_pass(
    service: ContainerMapService, clock: ManualClock
) -> None:
    await register(service, A)
    duty = ContainerBalancerDuty(service, clock, rebalance_delay_s=0)
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    assert set((await owners(service)).values()) == {A}


async def test_a_new_leadership_term_waits_again(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A)
    assert await settle(duty, clock) == PassOutcome.REBALANCED
    duty.reset()
    assert (await duty.run_once()).outcome == PassOutcome.WAITING


# --- keeping and balancing -----------------------------------------------------------------------


async def test_two_hosts_split_four_containers_two_and_two_then_the_map_is_kept(
    pool: Any, service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, B, A)
    assert await settle(duty, clock) == PassOutcome.REBALANCED
    assert await owners(service) == {0: A, 1: B, 2: A, 3: B}  # uniform over the sorted hosts
    versions = await PgContainerMapStore(pool).read_container_map()

    for _ in range(3):
        clock.advance(DELAY_MS)
        assert (await duty.run_once()).outcome == PassOutcome.KEPT
    assert await PgContainerMapStore(pool).read_container_map() == versions


async def test_a_third_host_joins_with_the_fewest_moves(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B)
    await settle(duty, clock)
    before = await owners(service)

    await register(service, C)
    joined = await duty.run_once()
    assert joined.outcome == PassOutcome.WAITING
    clock.advance(DELAY_MS)
    result = await duty.run_once()
    after = await owners(service)

    assert result.outcome == PassOutcome.REBALANCED
    assert spread(after, [A, B, C]) <= 1
    moved = [c for c in after if after[c] != before[c]]
    assert moved == list(result.moved) and len(moved) == 1 and after[moved[0]] == C


async def test_a_leaving_hosts_containers_go_to_the_least_loaded(pool: Any, clock: ManualClock) -> None:
    service = make_service(pool, clock, count=6)
    duty = ContainerBalancerDuty(service, clock, rebalance_delay_s=DELAY_MS / 1000)
    d = HostAddress("ss-d", 12345)
    await register(service, A, B, C)
    await settle(duty, clock)
    await register(service, d)
    await settle(duty, clock)
    before = await owners(service)
    load = Counter(before.values())
    assert sorted(load.values()) == [1, 1, 2, 2]

    heavy = next(h for h in (A, B, C, d) if load[h] == 2)
    light = {h for h in (A, B, C, d) if load[h] == 1}
    await deregister(service, heavy)
    # A departure does not wait out the delay: nobody serves the departed host's containers.
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    after = await owners(service)

    orphans = {c for c, h in before.items() if h == heavy}
    assert {after[c] for c in orphans} == light  # one to each of the two least loaded
    assert all(after[c] == before[c] for c in before if c not in orphans)
    assert spread(after, sorted({A, B, C, d} - {heavy})) == 0


async def test_a_single_remaining_host_takes_every_container(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B, C)
    await settle(duty, clock)
    await deregister(service, A, C)
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    assert await owners(service) == dict.fromkeys(range(4), B)


async def test_when_every_host_leaves_the_static_hosts_answer_again(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B)
    await settle(duty, clock)
    await deregister(service, A, B)
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    assignment = await service.assignment()
    assert assignment.from_static_hosts and set(assignment.owners.values()) == set(STATIC)
    clock.advance(DELAY_MS)
    assert (await duty.run_once()).outcome == PassOutcome.KEPT


async def test_more_hosts_than_containers_is_stable(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    hosts = [HostAddress(f"ss-{i}", 1) for i in range(6)]
    await register(service, *hosts)
    assert await settle(duty, clock) == PassOutcome.REBALANCED
    assert len(set((await owners(service)).values())) == 4
    clock.advance(DELAY_MS)
    assert (await duty.run_once()).outcome == PassOutcome.KEPT


async def test_a_map_written_for_another_container_count_is_replaced(pool: Any, clock: ManualClock) -> None:
    await make_service(pool, clock, count=6).rebalance([A, B])
    service = make_service(pool, clock, count=4)
    result = await service.rebalance([A, B])
    assert result.action == RebalanceAction.REBALANCED
    assert sorted(await PgContainerMapStore(pool).read_container_map()) == [0, 1, 2, 3]


# --- failures ------------------------------------------------------------------------------------


async def test_a_concurrent_map_write_costs_one_pass(
    pool: Any, service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B)
    await settle(duty, clock)
    await register(service, C)
    await duty.run_once()
    clock.advance(DELAY_MS)

    # Another writer (a leader that has not noticed it lost) changes the map while this
    # pass computes from what it read: the pass's write must fail, not overwrite it.
    store = PgContainerMapStore(pool)
    original_read = store.read_container_map

    class Interfering(PgContainerMapStore):
        async def read_container_map(self) -> Any:
            read = await original_read()
            await store.replace_container_map(
                {c: A for c in range(4)}, {c: v.version for c, v in read.items()}
            )
            return read

    racing = ContainerBalancerDuty(
        ContainerMapService(Interfering(pool), clock, 4, STATIC), clock, rebalance_delay_s=0
    )
    assert (await racing.run_once()).outcome == PassOutcome.CONFLICT
    assert await owners(service) == dict.fromkeys(range(4), A)

    # The next pass starts from the fresh map and balances it.
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    assert spread(await owners(service), [A, B, C]) <= 1


async def test_a_lost_database_costs_passes_not_the_duty(
    db_url: str, pg_admin_url: str, clock: ManualClock
) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=1)
    service = make_service(pool, clock)
    await register(service, A)
    duty = ContainerBalancerDuty(service, clock, rebalance_delay_s=0)
    database = pgurl.parse(db_url).database
    admin = await asyncpg.connect(pg_admin_url)
    try:
        # The duty's sessions die and new ones are refused, as while a database restarts.
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database
        )
        assert (await duty.run_once()).outcome == PassOutcome.UNAVAILABLE
        assert (await duty.run_once()).outcome == PassOutcome.UNAVAILABLE
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    finally:
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        await admin.close()
        await pool.close()


async def test_run_loops_until_cancelled(service: ContainerMapService, clock: ManualClock) -> None:
    duty = ContainerBalancerDuty(service, clock, rebalance_delay_s=0, tick_s=0.02)
    task = asyncio.create_task(duty.run())
    try:
        await register(service, A)
        for _ in range(200):
            if not (await service.assignment()).from_static_hosts:
                break
            await asyncio.sleep(0.02)
        assert set((await owners(service)).values()) == {A}
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_departure_while_a_join_waits_moves_at_once_and_includes_the_joiner(
    service: ContainerMapService, duty: ContainerBalancerDuty, clock: ManualClock
) -> None:
    await register(service, A, B)
    await settle(duty, clock)
    await register(service, C)
    assert (await duty.run_once()).outcome == PassOutcome.WAITING  # a join alone waits
    await deregister(service, A)
    result = await duty.run_once()
    assert result.outcome == PassOutcome.REBALANCED
    assert set((await owners(service)).values()) == {B, C}
    clock.advance(DELAY_MS)
    assert (await duty.run_once()).outcome == PassOutcome.KEPT


# --- heartbeats ----------------------------------------------------------------------------------


async def test_a_host_whose_heartbeats_stop_is_removed_and_its_containers_move(
    pool: Any, service: ContainerMapService, clock: ManualClock
) -> None:
    store = PgContainerMapStore(pool)
    duty = ContainerBalancerDuty(service, clock, rebalance_delay_s=1, host_expiry_s=5)
    await store.register_host(A, clock.now, heartbeat=True)
    await store.register_host(B, clock.now, heartbeat=True)
    await register(service, C)  # an operator's registration: it never heartbeats, never expires
    assert (await duty.run_once()).outcome == PassOutcome.WAITING
    clock.advance(1_000)
    assert (await duty.run_once()).outcome == PassOutcome.REBALANCED
    assert set((await owners(service)).values()) == {A, B, C}

    clock.advance(3_000)
    b = await store.get_host(B)
    assert await store.heartbeat_host(B, clock.now, b.version) == b.version + 1
    clock.advance(2_000)  # A last beat 6 s ago, B 2 s ago
    result = await duty.run_once()
    assert result.outcome == PassOutcome.REBALANCED and A not in result.hosts
    assert [h.address for h in await service.hosts()] == [B, C]
    assert set((await owners(service)).values()) == {B, C}


async def test_a_heartbeat_landing_after_the_judgement_keeps_the_host(
    pool: Any, service: ContainerMapService, clock: ManualClock
) -> None:
    store = PgContainerMapStore(pool)
    await store.register_host(A, clock.now, heartbeat=True)
    judged = await store.get_host(A)
    clock.advance(10_000)
    assert await store.heartbeat_host(A, clock.now, judged.version) is not None
    # The removal presents the version it judged the host by: the heartbeat bumped it.
    assert await store.remove_hosts([(A, judged.version)]) == []
    assert [h.address for h in await service.hosts()] == [A]
    assert await service.expire_hosts(5_000) == []
    clock.advance(6_000)
    assert await service.expire_hosts(5_000) == [A]
    assert await service.hosts() == []
