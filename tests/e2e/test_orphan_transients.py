"""Transient segments left by a store that was SIGKILLed are deleted by the store that serves
their container next (a restarted store on the same address, or another store the container
moves to), while a live connection's transient segment on that store is left alone, mid-write.
Real `pgcontroller segment-store` processes, real TCP, real PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.segmentstore.wire import commands as wc
from app.store.containers import PgContainerMapStore
from tests.e2e.test_segment_store_processes import (
    FAST,
    container_count,
    eventually,
    host,
    serves,
)
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.stores import start_store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def stream() -> str:
    return f"orphans/{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def cleanup(pool: Any, stream: str) -> AsyncIterator[None]:
    """Whatever a failing test leaves of its segments would count in other tests' checks."""
    yield
    await pool.execute("DELETE FROM embedded_segments WHERE starts_with(name, $1)", stream + "/")


def parent_in(container: int, count: int, stream: str) -> str:
    return next(
        name
        for n in range(1000)
        if container_for_segment(name := f"{stream}/{n}.#epoch.0", count) == container
    )


async def move_all(pool: Any, to: HostAddress, count: int) -> None:
    rows = await PgContainerMapStore(pool).read_container_map()
    await PgContainerMapStore(pool).replace_container_map(
        dict.fromkeys(range(count), to), {c: r.version for c, r in rows.items()}
    )


async def move(pool: Any, container: int, to: HostAddress) -> None:
    rows = await PgContainerMapStore(pool).read_container_map()
    assignment = {c: r.value for c, r in rows.items()}
    assignment[container] = to
    await PgContainerMapStore(pool).replace_container_map(assignment, {c: r.version for c, r in rows.items()})


async def start_transient(client: Client, parent: str, data: bytes) -> tuple[str, int]:
    """A large-event writer's first steps: its transient segment, set up, with `data` appended."""
    writer = wid()
    created = await client.expect(wc.CreateTransientSegment(rid(), writer, parent, ""), wc.SegmentCreated)
    assert await client.setup(created.segment, writer) == wc.NULL_ATTRIBUTE_VALUE
    assert isinstance(await client.append(writer, data, 0), wc.DataAppended)
    return created.segment, writer


async def rows_of(pool: Any, name: str) -> tuple[int, int]:
    """(segment rows, chunk rows) the segment has in PostgreSQL."""
    segments = await pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name = $1", name)
    chunks = await pool.fetchval("SELECT count(*) FROM segment_chunks WHERE segment = $1", name)
    return int(segments), int(chunks)


async def test_a_killed_stores_transient_segment_is_deleted_by_the_restarted_store(
    pool: Any, db_url: str, tmp_path: Path, stream: str, cleanup: None
) -> None:
    a = await start_store(tmp_path, "a", db_url, *FAST)
    restarted = None
    try:
        count = await container_count(pool)
        await move_all(pool, host(a), count)
        parent = parent_in(0, count, stream)
        await eventually(lambda: serves(a, parent), 5, "a serves every container")
        client = await Client.connect(a.address)
        await client.create(parent)
        transient, _ = await start_transient(client, parent, event(b"x" * 100_000))
        assert await rows_of(pool, transient) == (1, 1)

        await a.sigkill()  # its connection never closes: nothing deletes the segment
        await client.close()
        assert await rows_of(pool, transient) == (1, 1)

        # The same address again: the map still gives it every container, gained anew at start.
        restarted = await start_store(tmp_path, "a2", db_url, *FAST, "--segment-store-port", str(a.port))
        assert restarted.port == a.port

        async def gone() -> bool:
            return await rows_of(pool, transient) == (0, 0)

        await eventually(gone, 15, "the restarted store deletes the orphan transient segment")

        async def logged() -> bool:
            assert restarted is not None
            # Written just after the deletion commits, so it may land a moment after the rows go.
            return "deleted 1 orphan transient segments" in restarted.log()

        await eventually(logged, 5, "the restarted store logs the deletion")
        assert await rows_of(pool, parent) == (1, 0)  # its parent is untouched
    finally:
        if restarted is not None:
            await restarted.stop()
        if a.process.returncode is None:
            await a.stop()


async def test_the_store_taking_a_container_deletes_orphans_but_not_a_live_writers_segment(
    pool: Any, db_url: str, tmp_path: Path, stream: str, cleanup: None
) -> None:
    a = await start_store(tmp_path, "a", db_url, *FAST)
    b = await start_store(tmp_path, "b", db_url, *FAST)
    writer_connection: Client | None = None
    try:
        count = await container_count(pool)
        await move_all(pool, host(a), count)
        container = 0
        parent = parent_in(container, count, stream)
        await eventually(lambda: serves(a, parent), 5, "a serves every container")
        await eventually(lambda: serves_not(b, parent), 5, "b serves none")

        # A large event half written on a live connection of a ...
        writer_connection = await Client.connect(a.address)
        await writer_connection.create(parent)
        first, second = event(b"1" * 50_000), event(b"2" * 50_000)
        live, writer = await start_transient(writer_connection, parent, first)
        # ... and one left by a killed store of the same container (its connection died with it).
        killed = await Client.connect(b.address)
        await move(pool, container, host(b))
        await eventually(lambda: serves(b, parent), 5, "b serves the container")
        orphan, _ = await start_transient(killed, parent, event(b"o" * 10_000))
        await b.sigkill()
        await killed.close()
        assert await rows_of(pool, orphan) == (1, 1)

        # The container comes back to a: a takes it over with the writer's connection still open.
        await move(pool, container, host(a))
        await eventually(lambda: serves(a, parent), 5, "a serves the container again")

        async def orphan_gone() -> bool:
            return await rows_of(pool, orphan) == (0, 0)

        await eventually(orphan_gone, 15, "a deletes the killed store's transient segment")

        async def logged() -> bool:
            # Written just after the deletion commits, so it may land a moment after the rows go.
            return "deleted 1 orphan transient segments of containers" in a.log()

        await eventually(logged, 5, "a logs the deletion")
        # The live writer's segment, older than a's acquisition and idle past the grace, is
        # kept: the writer finishes its event and merges it.
        assert await rows_of(pool, live) == (1, 1)
        assert isinstance(await writer_connection.append(writer, second, 1), wc.DataAppended)
        merged = await writer_connection.expect(wc.MergeSegments(rid(), parent, live, ""), wc.SegmentsMerged)
        assert merged.new_target_write_offset == len(first) + len(second)
        # A transient segment that is gone was never merged twice: its merge is refused.
        again = await writer_connection.call(wc.MergeSegments(rid(), parent, orphan, ""))
        assert isinstance(again, wc.NoSuchSegment), again
    finally:
        if writer_connection is not None:
            await writer_connection.close()
        await a.stop()
        if b.process.returncode is None:
            await b.stop()


async def serves_not(store: Any, segment: str) -> bool:
    return not await serves(store, segment)
