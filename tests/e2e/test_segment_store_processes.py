"""`pgcontroller segment-store` processes on one database: each serves only the containers the
container map gives it (WrongHost, with Pravega's empty host, for the others), a read parked on a
container that moves is answered WrongHost at once, a writer's acknowledged event number follows
its segment to the new owner, and a store that stops heartbeating is removed by the controller's
leader, its containers move, and it registers again when it comes back."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from app.clock import SystemClock
from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.segmentstore.wire import commands as wc
from app.services.containers import ContainerMapService
from app.store.cluster import PgClusterStore
from app.store.containers import PgContainerMapStore
from app.testing.served import start_served
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.stores import StoreProcess, eventually, serves, start_store

pytestmark = pytest.mark.timeout(120)

FAST = ("--segment-store-heartbeat-s", "0.3", "--segment-store-expiry-s", "2")
NOBODY = (HostAddress("127.0.0.1", 1),)  # the static host: no store is it


async def container_count(pool: Any) -> int:
    return (await PgClusterStore(pool).get_settings()).container_count


def segment_in(container: int, count: int, stream: str = "sc/st") -> str:
    return next(
        name
        for n in range(1000)
        if container_for_segment(name := f"{stream}/{n}.#epoch.0", count) == container
    )


async def owners(pool: Any) -> dict[int, HostAddress]:
    return {c: row.value for c, row in (await PgContainerMapStore(pool).read_container_map()).items()}


def host(store: StoreProcess) -> HostAddress:
    return HostAddress(*store.address)


async def test_a_store_serves_only_its_containers_and_disowns_a_moved_ones_reads(
    pool: Any, db_url: str, tmp_path: Path
) -> None:
    a = await start_store(tmp_path, "a", db_url, *FAST)
    b = await start_store(tmp_path, "b", db_url, *FAST)
    try:
        count = await container_count(pool)
        service = ContainerMapService(PgContainerMapStore(pool), SystemClock(), count, NOBODY)
        registered = {h.address for h in await service.hosts()}
        assert registered == {host(a), host(b)}, (a.log(), b.log())
        mine, theirs = segment_in(0, count), segment_in(1, count)
        # Before any map the static host owns everything, and neither store is it.
        assert not await serves(a, mine) and not await serves(b, mine)

        await service.rebalance()  # the test acts as the leader
        assignment = await owners(pool)
        a_owns = {c for c, h in assignment.items() if h == host(a)}
        mine = segment_in(min(a_owns), count)
        theirs = segment_in(min(set(range(count)) - a_owns), count)
        await eventually(lambda: serves(a, mine), 5, "a serves its container")

        client = await Client.connect(a.address)
        for request in (
            wc.CreateSegment(rid(), theirs, 0, 0, ""),
            wc.GetStreamSegmentInfo(rid(), theirs, ""),
            wc.SetupAppend(rid(), wid(), theirs, ""),
            wc.ReadSegment(theirs, 0, 100, "", rid()),
        ):
            request_id = request.request_id
            assert await client.call(request) == wc.WrongHost(request_id, theirs, "", "")
        on_b = await Client.connect(b.address)
        await on_b.create(theirs)
        # Table segments are the exception: any store serves them (see ownership.py).
        table = f"{theirs}-table"
        await client.create_table(table)
        assert isinstance(await client.call(wc.GetTableSegmentInfo(rid(), table, "")), wc.TableSegmentInfo)

        # A writer on a, and a read parked at the tail of the same segment.
        await client.create(mine)
        writer = wid()
        assert await client.setup(mine, writer) == wc.NULL_ATTRIBUTE_VALUE
        assert isinstance(await client.append(writer, event(b"one"), 0), wc.DataAppended)
        reader = await Client.connect(a.address)
        parked = wc.ReadSegment(mine, len(event(b"one")), 100, "", rid())
        await reader.send(parked)
        await reader.nothing_within(0.3)

        # The container moves to b: the parked read is answered WrongHost at once (b's appends
        # would never wake it), the writer's next append too, and b knows the writer's number.
        moved = {c: (host(b) if c == min(a_owns) else h) for c, h in assignment.items()}
        rows = await PgContainerMapStore(pool).read_container_map()
        await PgContainerMapStore(pool).replace_container_map(moved, {c: r.version for c, r in rows.items()})
        assert await reader.recv(5) == wc.WrongHost(parked.request_id, mine, "", "")
        append = wc.AppendBlockEnd(writer, len(event(b"two")), event(b"two"), 1, 1, rid())
        assert await client.call(append) == wc.WrongHost(append.request_id, mine, "", "")
        # b follows the map on its own (LISTEN, or its 1 s poll): a knowing first says nothing of b.
        await eventually(lambda: serves(b, mine), 5, "b serves the moved container")
        assert await on_b.setup(mine, writer) == 0
        assert isinstance(await on_b.append(writer, event(b"two"), 1), wc.DataAppended)
        assert (await on_b.info(mine)).write_offset == 2 * len(event(b"one"))
        for each in (client, reader, on_b):
            await each.close()
    finally:
        await a.stop()
        await b.stop()
    # A clean stop deregisters: the leader need not wait out the expiry.
    assert await ContainerMapService(PgContainerMapStore(pool), SystemClock(), 4, NOBODY).hosts() == []


async def test_a_silent_store_is_removed_its_containers_move_and_it_registers_again(
    pool: Any, db_url: str, tmp_path: Path
) -> None:
    controller = await start_served(
        tmp_path,
        "--db-url", db_url, "--no-embedded-segment-store", "--segment-store-hosts", "127.0.0.1:1",
        "--container-rebalance-delay-s", "1", *FAST,
    )  # fmt: skip
    a = await start_store(tmp_path, "a", db_url, *FAST)
    b = await start_store(tmp_path, "b", db_url, *FAST)
    try:
        count = await container_count(pool)

        async def spread_over_both() -> bool:
            return set((await owners(pool)).values()) == {host(a), host(b)}

        await eventually(spread_over_both, 15, "the leader spreads the containers over both stores")
        a_container = min(c for c, h in (await owners(pool)).items() if h == host(a))
        segment = segment_in(a_container, count)
        await eventually(lambda: serves(a, segment), 5, "a serves its container")

        a.process.send_signal(signal.SIGSTOP)  # alive, but silent: no heartbeat, no answer
        try:

            async def all_on_b() -> bool:
                return set((await owners(pool)).values()) == {host(b)}

            await eventually(all_on_b, 10, "a is expired and its containers move to b")
            hosts = {h.address for h in await PgContainerMapStore(pool).list_hosts()}
            assert hosts == {host(b)}
            await eventually(lambda: serves(b, segment), 5, "b serves a's former container")
        finally:
            a.process.send_signal(signal.SIGCONT)

        # Back, a finds its row gone, registers again, serves nothing until the leader gives it
        # containers (after the rebalance delay), then serves them.
        await eventually(spread_over_both, 15, "a registers again and gets containers back")
        assert "was removed from the cluster; registering again" in a.log()
        a_container = min(c for c, h in (await owners(pool)).items() if h == host(a))
        await eventually(lambda: serves(a, segment_in(a_container, count)), 5, "a serves again")
        assert not await serves(
            a, segment_in(min(c for c, h in (await owners(pool)).items() if h == host(b)), count)
        )
    finally:
        for store in (a, b):
            await store.stop()
        await controller.stop()
