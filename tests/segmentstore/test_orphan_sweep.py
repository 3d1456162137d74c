"""The orphan sweep of transient segments (app/segmentstore/server/orphans.py) on a real
PostgreSQL with a hand-driven clock: which segments it deletes (only of containers acquired at
least the grace ago, created before the acquisition, unchanged for the grace, held by no live
connection), in bounded batches, and that a lost database costs a pass, not the store."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
import pytest

import pgurl
from app.ports import HostAddress
from app.segmentstore.server.orphans import OrphanTransients
from app.segmentstore.server.ownership import ContainerOwnership
from app.segmentstore.server.transients import transient_name, transient_tag
from app.segmentstore.storage import AppendRequest
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

ME = HostAddress("127.0.0.1", 12345)
PARENT = "sc/st/0.#epoch.0"
GRACE_MS = 500


@pytest.fixture
async def storage(pool: Any, clock: ManualClock) -> PgSegmentStorage:
    storage = PgSegmentStorage(pool, clock)
    await storage.create_segment(PARENT, "stream", 0, 0, 0)
    return storage


async def transient(storage: PgSegmentStorage, n: int) -> str:
    name = f"{PARENT}#transient.{n:032x}.{n:032x}"
    await storage.create_segment(name, "transient", 0, 0, 0)
    await storage.append(AppendRequest(name, n, b"x" * 1000, 0, 1))
    return name


async def existing(pool: Any) -> set[str]:
    rows = await pool.fetch("SELECT name FROM embedded_segments WHERE kind = 'transient'")
    chunks = await pool.fetch("SELECT DISTINCT segment FROM segment_chunks")
    names = {r["name"] for r in rows}
    assert {r["segment"] for r in chunks} - {PARENT} <= names  # no chunk outlives its segment
    return names


async def test_only_provable_orphans_of_acquired_containers_are_deleted_in_batches(
    pool: Any, storage: PgSegmentStorage, clock: ManualClock
) -> None:
    orphans = [await transient(storage, n) for n in range(1, 6)]
    live = await transient(storage, 6)
    recent = await transient(storage, 7)
    ownership = ContainerOwnership(ME, 4, [ME])
    live_set = {live}
    sweep = OrphanTransients(storage, clock, lambda: live_set, ownership, grace_ms=GRACE_MS, batch_size=2)
    assert await sweep.sweep() == 0  # no map read yet: nothing is owned

    clock.advance(1000)
    ownership.update({})  # the static host is this store: it owns every container now
    assert await sweep.sweep() == 0  # acquired, but the previous owner may still serve
    clock.advance(GRACE_MS - 1)
    assert await sweep.sweep() == 0
    after = await transient(storage, 8)  # created after the acquisition: this store's own
    # The due pass comes late (say the database was down): `after` is idle past the grace by
    # then, `recent` is not (a writer still appends to it).
    clock.advance(10 * GRACE_MS)
    await storage.append(AppendRequest(recent, 7, b"y", 1, 1))
    assert await sweep.sweep() == len(orphans)
    assert await existing(pool) == {live, recent, after}
    assert sweep.cleaned == len(orphans)
    assert await sweep.sweep() == 0  # swept once per acquisition

    # Lost and gained again (even between two passes): a new acquisition, swept again.
    ownership.disown_all()
    ownership.update({})
    live_set.clear()
    clock.advance(GRACE_MS)
    assert await sweep.sweep() == 0
    clock.advance(GRACE_MS)
    assert await sweep.sweep() == 3
    assert await existing(pool) == set()


async def test_a_sweep_meeting_a_lost_database_is_retried_at_the_next_pass(
    db_url: str,
    pg_admin_url: str,
    pool: Any,
    storage: PgSegmentStorage,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    orphan = await transient(storage, 1)
    clock.advance(1000)
    ownership = ContainerOwnership(ME, 4, [ME])
    ownership.update({})
    sweep = OrphanTransients(storage, clock, set, ownership, grace_ms=0)
    database = pgurl.parse(db_url).database
    admin = await asyncpg.connect(pg_admin_url)
    try:
        # Its sessions die and new ones are refused, as while the database restarts.
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database
        )
        with caplog.at_level(logging.WARNING):
            assert await sweep.sweep() == 0
            assert await sweep.sweep() == 0
        assert "sweeping orphan transient segments failed, trying again" in caplog.text
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        assert await sweep.sweep() == 1
        assert orphan not in await existing(pool)
    finally:
        await admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        await admin.close()


async def test_without_a_map_only_what_existed_before_the_store_started_is_swept(
    pool: Any, storage: PgSegmentStorage, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    before = await transient(storage, 1)
    assert before in await existing(pool)
    clock.advance(10)
    sweep = OrphanTransients(storage, clock, set, None, grace_ms=0)
    mine = await transient(storage, 2)
    clock.advance(10)
    with caplog.at_level(logging.INFO):
        assert await sweep.sweep() == 1
    assert "deleted 1 orphan transient segments before this store started" in caplog.text
    assert await existing(pool) == {mine}
    clock.advance(10_000)
    assert await sweep.sweep() == 0  # only at start: later ones belong to this store's connections
    assert await existing(pool) == {mine}


async def test_a_store_of_a_group_sweeps_only_what_its_own_index_or_no_member_left(
    pool: Any, storage: PgSegmentStorage, clock: ManualClock
) -> None:
    """Store 1 of 3 behind one port: the others' transient segments (tagged 0 and 2) are theirs to
    judge, whatever their age; its own index's (an earlier life's), those tagged beyond the group
    and those of a store that never tagged (a name too short to carry a tag) are swept."""

    async def tagged(tag: int, writer: int) -> str:
        name = transient_name(PARENT, writer, tag)
        await storage.create_segment(name, "transient", 0, 0, 0)
        return name

    siblings = [await tagged(0, 1), await tagged(2, 2)]
    own = await tagged(1, 3)
    beyond = await tagged(7, 4)
    assert transient_tag(beyond) == 7
    untagged = f"{PARENT}#transient.{5:032x}.short"
    await storage.create_segment(untagged, "transient", 0, 0, 0)
    assert transient_tag(own) == 1 and transient_tag(untagged) is None

    ownership = ContainerOwnership(ME, 4, [ME])
    sweep = OrphanTransients(storage, clock, set, ownership, grace_ms=GRACE_MS, group=(1, 3))
    clock.advance(1000)
    ownership.update({})
    assert await sweep.sweep() == 0  # acquired: due after the grace
    clock.advance(10 * GRACE_MS)
    assert await sweep.sweep() == 3
    assert await existing(pool) == set(siblings)
