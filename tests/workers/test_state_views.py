"""The leader's customized-view aggregation over the real services and database, one pass at a
time (`run_once`), plus the loop woken by real notifications.

Hosts report, views follow exactly; a removed host (over the service or by deregistering its
segment store) leaves the views; toggling the config starts and stops aggregation; states of
other names are stored, not aggregated; a deposed leader's pass writes nothing and leaves its
work to the new one; 100 hosts x 1,000 partitions are aggregated and checked entry by entry.
The leader term is seeded in cluster_leader with plain SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from app.clock import SystemClock
from app.domain.errors import NotFound, StoreUnavailable
from app.ports import HostAddress
from app.services.containers import ContainerMapService
from app.services.state_views import DEFAULT_BATCH, StateViewService, ViewAggregation
from app.store.cache import RecordCache
from app.store.containers import PgContainerMapStore
from app.store.notifications import PgListener
from app.store.pool import create_pool
from app.store.state_views import PgStateViewStore
from app.testing.clock import ManualClock
from workers.state_views import StateViewAggregator

S, R = "SERVING", "db"
H1, H2, H3 = "10.0.0.1:12345", "10.0.0.2:12345", "10.0.0.3:12345"


@dataclass
class World:
    pool: Any
    store: PgStateViewStore
    service: StateViewService
    clock: ManualClock
    leader: dict[str, Any]  # what the aggregator believes: {"leads": bool, "term": int | None}

    def aggregator(self, *, batch: int = DEFAULT_BATCH, poll_s: float = 0.5) -> StateViewAggregator:
        return StateViewAggregator(
            ViewAggregation(self.store, self.clock, batch=batch),
            lambda: bool(self.leader["leads"]),
            lambda: self.leader["term"],
            poll_s=poll_s,
        )

    async def set_term(self, term: int) -> None:
        await self.pool.execute(
            "INSERT INTO cluster_leader (id, controller_id, term, since) VALUES (1, 'test', $1, 0) "
            "ON CONFLICT (id) DO UPDATE SET term = $1, version = cluster_leader.version + 1",
            term,
        )

    async def aggregate(self, names: list[str]) -> None:
        config = await self.service.config()
        await self.service.set_config(names, config.version)

    async def report(self, host: str, partitions: dict[str, str | None], *, merge: bool = False) -> None:
        await self.service.report(host, S, R, partitions, merge=merge)


@pytest.fixture
async def world(db_url: str) -> AsyncIterator[World]:
    pool = await create_pool(db_url, min_size=1, max_size=8)
    try:
        store = PgStateViewStore(pool)
        clock = ManualClock()
        w = World(pool, store, StateViewService(store, clock, poll_s=0.1), clock, {"leads": True, "term": 1})
        await w.set_term(1)
        yield w
    finally:
        await pool.close()


async def partitions_of(world: World, resource: str = R, state_name: str = S) -> dict[str, dict[str, str]]:
    return (await world.store.get_view(state_name, resource)).partitions


async def test_two_hosts_report_and_the_view_is_correct(world: World) -> None:
    aggregator = world.aggregator()
    await world.aggregate([S])
    summary = await aggregator.run_once()
    assert summary.built == (S,) and summary.views == ()

    await world.report(H1, {"p0": "LEADER", "p1": "STANDBY"})
    await world.report(H2, {"p0": "STANDBY", "p2": '{"lag": 3}'})
    summary = await aggregator.run_once()
    assert (summary.changes, summary.partitions) == (4, 3)
    assert [(c.state_name, c.resource) for c in summary.views] == [(S, R)]
    assert await partitions_of(world) == {
        "p0": {H1: "LEADER", H2: "STANDBY"},
        "p1": {H1: "STANDBY"},
        "p2": {H2: '{"lag": 3}'},
    }
    version = (await world.store.get_view(S, R)).version

    # A merge touches one partition: only it is recomputed, the view moves once.
    await world.report(H2, {"p0": "LEADER", "p2": None}, merge=True)
    summary = await aggregator.run_once()
    assert summary.partitions == 2 and len(summary.views) == 1
    view = await world.store.get_view(S, R)
    assert view.version > version
    assert view.partitions == {"p0": {H1: "LEADER", H2: "LEADER"}, "p1": {H1: "STANDBY"}}

    # Nothing new: nothing written.
    assert (await aggregator.run_once()).views == ()
    assert (await world.store.get_view(S, R)).version == view.version


async def test_a_removed_host_leaves_the_view(world: World) -> None:
    aggregator = world.aggregator()
    await world.aggregate([S])
    await world.report(H1, {"p0": "ON", "p1": "ON"})
    await world.report(H2, {"p0": "OFF"})
    await world.service.report(H2, S, "other", {"x": "ON"}, merge=False)
    await aggregator.run_once()

    assert await world.service.remove_participant(H2) == 2
    summary = await aggregator.run_once()
    moved = {(c.state_name, c.resource): c.version for c in summary.views}
    assert moved[(S, R)] is not None and moved[(S, "other")] is None
    assert await partitions_of(world) == {"p0": {H1: "ON"}, "p1": {H1: "ON"}}
    # H2 was the only one reporting "other": its view is gone.
    with pytest.raises(NotFound):
        await world.store.get_view(S, "other")
    with pytest.raises(NotFound):
        await world.service.remove_participant(H2)


async def test_a_deregistered_segment_store_leaves_the_view(world: World) -> None:
    aggregator = world.aggregator()
    hosts = ContainerMapService(PgContainerMapStore(world.pool), SystemClock(), 4, [HostAddress("static", 1)])
    for address in (H1, H2):
        host, port = address.split(":")
        await hosts.register_host(host, int(port))
    await world.aggregate([S])
    await world.report(H1, {"p0": "ON"})
    await world.report(H2, {"p0": "OFF", "p1": "OFF"})
    await aggregator.run_once()
    assert await partitions_of(world) == {"p0": {H1: "ON", H2: "OFF"}, "p1": {H2: "OFF"}}

    await hosts.deregister_host("10.0.0.2", 12345)
    await aggregator.run_once()
    assert await partitions_of(world) == {"p0": {H1: "ON"}}
    assert await world.service.states(H2) == []


async def test_toggling_the_config_starts_and_stops_aggregation(world: World) -> None:
    aggregator = world.aggregator()
    await world.report(H1, {"p0": "ON"})
    await world.service.report(H1, "OTHER", R, {"p0": "x"}, merge=False)
    summary = await aggregator.run_once()
    # Stored, not aggregated; the log entries are consumed all the same.
    assert (summary.built, summary.views, summary.changes) == ((), (), 2)
    assert await world.store.list_views() == []
    assert [s.state_name for s in await world.service.states(H1)] == ["OTHER", S]
    assert await world.store.take_changes(10) == []

    # Starts: built from every state stored meanwhile.
    await world.aggregate([S])
    summary = await aggregator.run_once()
    assert summary.built == (S,)
    assert await partitions_of(world) == {"p0": {H1: "ON"}}
    first = (await world.store.get_view(S, R)).version
    assert [v.state_name for v in await world.store.list_views()] == [S]

    await world.report(H2, {"p0": "OFF"})
    await aggregator.run_once()
    assert await partitions_of(world) == {"p0": {H1: "ON", H2: "OFF"}}

    # Stops: the views go, reports keep being stored without a view.
    await world.aggregate([])
    summary = await aggregator.run_once()
    assert summary.dropped == (S,)
    assert [c.version for c in summary.views] == [None]
    assert await world.store.list_views() == []
    await world.report(H3, {"p0": "ON"})
    await aggregator.run_once()
    assert await world.store.list_views() == []
    assert len(await world.store.participants()) == 3

    # Starts again: rebuilt with everything, at a higher version than before.
    await world.aggregate([S, "OTHER"])
    summary = await aggregator.run_once()
    assert summary.built == ("OTHER", S)
    view = await world.store.get_view(S, R)
    assert view.version > first
    assert view.partitions == {"p0": {H1: "ON", H2: "OFF", H3: "ON"}}
    assert await partitions_of(world, state_name="OTHER") == {"p0": {H1: "x"}}


async def test_only_the_leader_aggregates_and_a_deposed_leaders_pass_writes_nothing(world: World) -> None:
    await world.aggregate([S])
    await world.report(H1, {"p0": "ON"})

    world.leader.update(leads=False)
    assert (await world.aggregator().run_once()).skipped
    assert await world.store.list_views() == []

    # This process still believes it leads under term 1, but another took term 2.
    world.leader.update(leads=True, term=1)
    await world.set_term(2)
    stale = await world.aggregator().run_once()
    assert stale.fenced and stale.views == ()
    assert await world.store.list_views() == []
    assert await world.store.built_names() == frozenset()
    assert len(await world.store.take_changes(10)) == 1

    # The new leader finds the work where the deposed one left it.
    world.leader.update(term=2)
    summary = await world.aggregator().run_once()
    assert not summary.fenced and summary.built == (S,)
    assert await partitions_of(world) == {"p0": {H1: "ON"}}
    assert await world.store.take_changes(10) == []


async def test_changes_are_consumed_in_batches(world: World) -> None:
    aggregator = world.aggregator(batch=7)
    await world.aggregate([S])
    await aggregator.run_once()
    await world.report(H1, {f"p{i}": "ON" for i in range(30)})
    summary = await aggregator.run_once()
    assert (summary.changes, summary.partitions) == (30, 30)
    assert len(summary.views) == 5  # one version move per batch of 7, 7, 7, 7 and 2 entries
    assert len(await partitions_of(world)) == 30


async def test_100_hosts_by_1000_partitions_are_aggregated_exactly(world: World) -> None:
    hosts, partitions = 100, 1_000
    aggregator = world.aggregator()
    await world.aggregate([S])
    await aggregator.run_once()

    def state(h: int, p: int) -> str:
        return ("LEADER", "STANDBY", "OFFLINE")[(h + p) % 3]

    names = [f"host{h}:1" for h in range(hosts)]
    for h, name in enumerate(names):
        await world.report(name, {f"p{p}": state(h, p) for p in range(partitions)})
    summary = await aggregator.run_once()
    assert (summary.changes, summary.partitions) == (hosts * partitions, partitions)
    expected = {f"p{p}": {names[h]: state(h, p) for h in range(hosts)} for p in range(partitions)}
    assert await partitions_of(world) == expected

    # One host changes 10 partitions and drops one; another leaves: exactly those follow.
    await world.report(names[5], {**{f"p{p}": "CHANGED" for p in range(10)}, "p999": None}, merge=True)
    await world.service.remove_participant(names[7])
    summary = await aggregator.run_once()
    assert summary.partitions == partitions  # host 7's departure touches every partition
    for p in range(10):
        expected[f"p{p}"][names[5]] = "CHANGED"
    del expected["p999"][names[5]]
    for view in expected.values():
        del view[names[7]]
    assert await partitions_of(world) == expected
    assert [v.partition_count for v in await world.store.list_views()] == [partitions]


# --- the loop ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running(task: Callable[[], Any]) -> AsyncIterator[asyncio.Task[Any]]:
    started = asyncio.create_task(task())
    try:
        yield started
    finally:
        started.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await started


async def test_a_report_reaches_a_waiting_listener_through_notifications(world: World, db_url: str) -> None:
    # The poll is far longer than the test may take: only notifications can make it in time.
    aggregator = world.aggregator(poll_s=30)
    service = StateViewService(world.store, world.clock, poll_s=30)
    listener = PgListener(db_url, RecordCache())
    listener.on_state_change(aggregator.wake)
    listener.on_view_change(service.view_changed)
    await world.aggregate([S])
    async with running(listener.run), running(aggregator.run):
        await asyncio.wait_for(listener.connected.wait(), 10)
        await world.report(H1, {"p0": "ON"})
        first = await asyncio.wait_for(service.wait_view(S, R, 0, 20_000), 5)
        assert first.partitions == {"p0": {H1: "ON"}}

        waiting = asyncio.create_task(service.wait_view(S, R, first.version, 20_000))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await world.report(H2, {"p0": "OFF"})
        second = await asyncio.wait_for(waiting, 5)
        assert second.version > first.version
        assert second.partitions == {"p0": {H1: "ON", H2: "OFF"}}


async def test_without_notifications_the_loop_and_the_waiter_poll(world: World) -> None:
    aggregator = world.aggregator(poll_s=0.2)
    await world.aggregate([S])
    async with running(aggregator.run):
        await world.report(H1, {"p0": "ON"})
        view = await asyncio.wait_for(world.service.wait_view(S, R, 0, 20_000), 5)
        assert view.partitions == {"p0": {H1: "ON"}}


async def test_a_wait_times_out_with_the_view_as_it_is_or_not_found(world: World) -> None:
    with pytest.raises(NotFound):
        await world.service.wait_view(S, R, 0, 100)
    await world.aggregate([S])
    await world.report(H1, {"p0": "ON"})
    await world.aggregator().run_once()
    view = await world.store.get_view(S, R)
    loop = asyncio.get_running_loop()
    began = loop.time()
    same = await world.service.wait_view(S, R, view.version, 300)
    assert same == view and loop.time() - began >= 0.3


async def test_a_wait_ends_at_once_when_the_view_is_removed(world: World) -> None:
    aggregator = world.aggregator()
    await world.aggregate([S])
    await world.report(H1, {"p0": "ON"})
    await aggregator.run_once()
    version = (await world.store.get_view(S, R)).version
    waiting = asyncio.create_task(world.service.wait_view(S, R, version, 20_000))
    await asyncio.sleep(0.05)
    await world.service.remove_participant(H1)
    await aggregator.run_once()
    with pytest.raises(NotFound, match="removed"):
        await asyncio.wait_for(waiting, 5)


async def test_the_loop_survives_a_lost_database(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    store = PgStateViewStore(pool)
    aggregator = StateViewAggregator(
        ViewAggregation(store, ManualClock()), lambda: True, lambda: 1, poll_s=0.05
    )
    await pool.close()
    with pytest.raises(StoreUnavailable):
        await aggregator.run_once()
    async with running(aggregator.run) as task:
        await asyncio.sleep(0.3)  # several failed passes
        assert not task.done()


async def test_the_reporting_views_show_states_and_views_row_by_row(world: World) -> None:
    aggregator = world.aggregator()
    await world.aggregate([S])
    world.clock.now = 5_000
    await world.report(H1, {"p0": "ON", "p1": "OFF"})
    await world.service.report(H2, "OTHER", R, {"p0": "x"}, merge=False)
    world.clock.now = 6_000
    await aggregator.run_once()
    view = await world.store.get_view(S, R)

    states = await world.pool.fetch(
        "SELECT participant, state_name, resource, partition, state, state_set_at, reported_at, "
        "report_version, aggregated FROM reporting.participant_states ORDER BY 1, 2, 3, 4"
    )
    assert [tuple(r) for r in states] == [
        (H1, S, R, "p0", "ON", 5_000, 5_000, 0, True),
        (H1, S, R, "p1", "OFF", 5_000, 5_000, 0, True),
        (H2, "OTHER", R, "p0", "x", 5_000, 5_000, 0, False),
    ]
    views = await world.pool.fetch(
        "SELECT state_name, resource, partition, participant, state, view_version, view_updated_at, "
        "partition_updated_at FROM reporting.customized_views ORDER BY 1, 2, 3, 4"
    )
    assert [tuple(r) for r in views] == [
        (S, R, "p0", H1, "ON", view.version, 6_000, 6_000),
        (S, R, "p1", H1, "OFF", view.version, 6_000, 6_000),
    ]
