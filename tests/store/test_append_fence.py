"""The append fence (app/store/append_fence.py) against the suite's PostgreSQL: an append commits
only while the container map gives its segment's container to this store or to nobody, and a move
of the container waits for the appends in flight, so none commits after it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.segmentstore.storage import AppendRequest, ContainerMoved
from app.store.append_fence import AppendFence
from app.store.containers import PgContainerMapStore
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

CONTAINERS = 4
ME, OTHER = HostAddress("10.0.0.1", 12345), HostAddress("10.0.0.2", 12345)
SEGMENT = "fence/s/0.#epoch.0"


def _segment_in_another_container(of: str) -> str:
    taken = container_for_segment(of, CONTAINERS)
    for n in range(1, 100):
        name = f"fence/s/{n}.#epoch.0"
        if container_for_segment(name, CONTAINERS) != taken:
            return name
    raise AssertionError("every segment in one container")


NEIGHBOUR = _segment_in_another_container(SEGMENT)


@pytest.fixture
async def storage(db: Database) -> PgSegmentStorage:
    storage = PgSegmentStorage(db, ManualClock(5_000), fence=AppendFence(CONTAINERS, ME))
    for name in (SEGMENT, NEIGHBOUR):
        await storage.create_segment(name, "stream", 0, 0, 0)
    return storage


async def _assign(db: Database, segment: str, owner: HostAddress) -> None:
    await db.execute(
        "INSERT INTO container_map (container, host, port) VALUES ($1, $2, $3)"
        " ON CONFLICT (container) DO UPDATE SET host = $2, port = $3, version = container_map.version + 1",
        container_for_segment(segment, CONTAINERS),
        owner.host,
        owner.port,
    )


def _append(segment: str, writer: int, n: int) -> AppendRequest:
    return AppendRequest(segment, writer, n.to_bytes(8, "big"), n, 1)


async def test_an_append_commits_for_the_owner_and_for_an_unmapped_container_and_not_elsewhere(
    storage: PgSegmentStorage, db: Database
) -> None:
    # No row: the static hosts' rule, which the store applies before appending.
    assert (await storage.append(_append(SEGMENT, 1, 1))).length == 8
    await _assign(db, SEGMENT, ME)
    assert (await storage.append(_append(SEGMENT, 1, 2))).length == 16
    await _assign(db, SEGMENT, OTHER)
    with pytest.raises(ContainerMoved):
        await storage.append(_append(SEGMENT, 1, 3))
    assert (await storage.segment_state(SEGMENT)).length == 16
    assert await storage.writer_event_number(SEGMENT, 1) == 2
    # Without a fence (the tests' stores) the map is not consulted.
    unfenced = PgSegmentStorage(db, ManualClock(5_000))
    assert (await unfenced.append(_append(SEGMENT, 1, 3))).length == 24


async def test_a_move_waits_for_the_appends_in_flight_and_none_commits_after_it(
    storage: PgSegmentStorage, db: Database, db_url: str
) -> None:
    await _assign(db, SEGMENT, ME)
    await _assign(db, NEIGHBOUR, ME)
    holder = await asyncpg.connect(db_url)
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute("SELECT 1 FROM embedded_segments WHERE name = $1 FOR UPDATE", NEIGHBOUR)
        # One group: the first append passes the fence (its map row now share-locked), the
        # second waits on the held segment, so the group's transaction stays open.
        first = asyncio.ensure_future(storage.append(_append(SEGMENT, 1, 1)))
        second = asyncio.ensure_future(storage.append(_append(NEIGHBOUR, 2, 1)))
        await asyncio.sleep(0.3)
        assert not first.done() and not second.done()
        maps = PgContainerMapStore(db)
        current = await maps.read_container_map()
        moved = {
            c: (OTHER if c == container_for_segment(SEGMENT, CONTAINERS) else v.value)
            for c, v in current.items()
        }
        move = asyncio.ensure_future(
            maps.replace_container_map(moved, {c: v.version for c, v in current.items()})
        )
        await asyncio.sleep(0.5)
        assert not move.done(), "the container moved while an append of it was in flight"
        await held.rollback()
        await asyncio.wait_for(move, 10)
        assert (await first).length == 8 and (await second).length == 8
    finally:
        await holder.close()
    with pytest.raises(ContainerMoved):
        await storage.append(_append(SEGMENT, 1, 2))
    assert (await storage.append(_append(NEIGHBOUR, 2, 2))).length == 16
