"""`serve --processes 2`: both children run the embedded segment store behind the shared port, and
what one store does is seen through the other. The kernel's socket table says which child holds
each connection (tests/support/sockets.py), so every cross-process case is pinned, not left to the
kernel's hashing: a read parked in one child wakes on an append, a seal, a deletion or a merge
made through the other (well within the 20 s tail wait it would otherwise sit out); two writers in
different children appending to one segment keep their own orders and lose nothing; a conditional
append raced from both children has one winner; the children share one registration, which a
child's own restart does not remove and the run's stop does."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess, start_served
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.sockets import holder_of

pytestmark = pytest.mark.timeout(180)

# A read woken by the other child answers at once; one that missed it would sit out the default
# 20 s tail wait, so anything under this bound proves the wake-up crossed the process boundary.
WOKEN_WITHIN_S = 3.0
TRIES = 200


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_served(tmp_path, "--db-url", db_url, "--processes", "2", "--instance-id", "shared")
    try:
        yield instance
    finally:
        if instance.process.returncode is None:
            assert await instance.stop() == 0, instance.log()


def children(work: Path) -> list[int]:
    info: dict[str, Any] = json.loads((work / "ready.json").read_text())
    return [int(pid) for pid in info["processes"]]


async def connect_to(served: ServedProcess, pid: int, pids: list[int]) -> Client:
    """A connection (Hello done) to the store held by child `pid`."""
    assert served.segment_store_port is not None
    for _ in range(TRIES):
        client = await Client.connect(("127.0.0.1", served.segment_store_port))
        local_port = client.writer.get_extra_info("sockname")[1]
        if holder_of(pids, served.segment_store_port, local_port) == pid:
            return client
        await client.close()
    raise AssertionError(f"no connection reached child {pid} in {TRIES} tries")


@asynccontextmanager
async def pinned_pair(
    served: ServedProcess, work: Path, reader_child: int
) -> AsyncIterator[tuple[Client, Client]]:
    """(a connection to child `reader_child`, a connection to the other child), closed after."""
    pids = children(work)
    first = await connect_to(served, pids[reader_child], pids)
    try:
        second = await connect_to(served, pids[1 - reader_child], pids)
        try:
            yield first, second
        finally:
            await second.close()
    finally:
        await first.close()


async def parked(client: Client, segment: str, offset: int) -> asyncio.Task[wc.Command]:
    """A read at the tail, sent and seen to park (no answer for a moment)."""
    await client.send(wc.ReadSegment(segment, offset, 1 << 20, "", rid()))
    task = asyncio.create_task(client.recv(timeout_s=30))
    await asyncio.sleep(0.3)
    assert not task.done(), task.result()
    return task


async def woken(task: asyncio.Task[wc.Command]) -> tuple[wc.Command, float]:
    began = time.monotonic()
    reply = await asyncio.wait_for(task, 30)
    return reply, time.monotonic() - began


@pytest.mark.parametrize("reader_child", [0, 1])
async def test_a_read_parked_in_one_child_wakes_on_changes_made_through_the_other(
    served: ServedProcess, tmp_path: Path, reader_child: int
) -> None:
    async with pinned_pair(served, tmp_path, reader_child) as (reader, other):
        segment = f"shared/wake{reader_child}/0.#epoch.0"
        await other.create(segment)
        writer = wid()
        await other.setup(segment, writer)

        # An append through the other child.
        task = await parked(reader, segment, 0)
        data = event(b"hello")
        assert isinstance(await other.append(writer, data, 0), wc.DataAppended)
        reply, waited = await woken(task)
        assert isinstance(reply, wc.SegmentRead) and reply.data == data, reply
        assert waited < WOKEN_WITHIN_S, f"the read woke after {waited:.1f} s"

        # A seal through the other child ends a read parked at the tail.
        task = await parked(reader, segment, len(data))
        await other.expect(wc.SealSegment(rid(), segment, ""), wc.SegmentSealed)
        reply, waited = await woken(task)
        assert isinstance(reply, wc.SegmentIsSealed) and reply.offset == len(data), reply
        assert waited < WOKEN_WITHIN_S

        # A deletion through the other child ends a read parked on the deleted segment.
        gone = f"shared/wake{reader_child}/1.#epoch.0"
        await other.create(gone)
        task = await parked(reader, gone, 0)
        await other.expect(wc.DeleteSegment(rid(), gone, ""), wc.SegmentDeleted)
        reply, waited = await woken(task)
        assert isinstance(reply, wc.NoSuchSegment), reply
        assert waited < WOKEN_WITHIN_S


async def test_a_merge_through_one_child_wakes_a_read_parked_in_the_other(
    served: ServedProcess, tmp_path: Path
) -> None:
    async with pinned_pair(served, tmp_path, 0) as (reader, other):
        target = "shared/merge/0.#epoch.0"
        source = f"{target}#transaction.{wid():032x}"
        await other.create(target)
        await other.create(source)
        writer = wid()
        await other.setup(source, writer)
        data = event(b"committed")
        assert isinstance(await other.append(writer, data, 0), wc.DataAppended)
        task = await parked(reader, target, 0)
        merged = await other.call(wc.MergeSegments(rid(), target, source, ""))
        assert isinstance(merged, wc.SegmentsMerged), merged
        reply, waited = await woken(task)
        assert isinstance(reply, wc.SegmentRead) and reply.data == data, reply
        assert waited < WOKEN_WITHIN_S


def events_of(data: bytes) -> list[bytes]:
    out = []
    at = 0
    while at < len(data):
        kind, size = struct.unpack_from(">ii", data, at)
        assert kind == 0, f"no event header at {at}"
        out.append(data[at + 8 : at + 8 + size])
        at += 8 + size
    assert at == len(data)
    return out


async def read_all(client: Client, segment: str) -> bytes:
    data = b""
    while True:
        reply = await client.read(segment, len(data))
        assert isinstance(reply, wc.SegmentRead), reply
        data += reply.data
        if reply.at_tail or reply.end_of_segment:
            return data


async def test_writers_in_both_children_append_to_one_segment_each_in_order_none_lost(
    served: ServedProcess, tmp_path: Path
) -> None:
    blocks = 150
    async with pinned_pair(served, tmp_path, 0) as (first, second):
        segment = "shared/order/0.#epoch.0"
        await first.create(segment)

        async def write(client: Client, mark: str) -> None:
            writer = wid()
            await client.setup(segment, writer)
            for number in range(blocks):
                data = event(f"{mark}{number:04d}".encode()) + event(f"{mark}{number:04d}b".encode())
                reply = await client.append(writer, data, 2 * number + 1, 2)
                assert isinstance(reply, wc.DataAppended), reply
            # Sent again (a writer retrying after a lost ack): acknowledged, stored nothing.
            again = await client.append(writer, event(b"dup") + event(b"dup"), 2 * blocks - 1, 2)
            assert isinstance(again, wc.DataAppended), again

        await asyncio.gather(write(first, "a"), write(second, "b"))
        stored = events_of(await read_all(first, segment))
        for mark in ("a", "b"):
            mine = [e.decode() for e in stored if e.decode().startswith(mark)]
            expected = [f"{mark}{n:04d}{suffix}" for n in range(blocks) for suffix in ("", "b")]
            assert mine == expected
        assert len(stored) == 4 * blocks
        # Both children interleaved whole blocks: a block's two events are always adjacent.
        for at in range(0, len(stored), 2):
            assert stored[at] + b"b" == stored[at + 1]


async def test_a_conditional_append_raced_from_both_children_has_one_winner(
    served: ServedProcess, tmp_path: Path
) -> None:
    async with pinned_pair(served, tmp_path, 0) as (first, second):
        segment = "shared/cas/0.#epoch.0"
        await first.create(segment)
        writers = (wid(), wid())
        await first.setup(segment, writers[0])
        await second.setup(segment, writers[1])
        for round_ in range(20):
            offset = (await first.info(segment)).write_offset
            replies = await asyncio.gather(
                first.call(wc.ConditionalAppend(writers[0], round_ + 1, offset, wc.Event(b"x"), rid())),
                second.call(wc.ConditionalAppend(writers[1], round_ + 1, offset, wc.Event(b"y"), rid())),
            )
            kinds = sorted(type(reply).__name__ for reply in replies)
            assert kinds == ["ConditionalCheckFailed", "DataAppended"], replies
        assert len(await read_all(first, segment)) == 20 * len(event(b"x"))


async def host_rows(db_url: str, port: int) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(db_url)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT host, port, version FROM segment_store_hosts WHERE port = $1", port
        )
        return rows
    finally:
        await conn.close()


async def test_the_children_share_one_registration_that_only_the_runs_stop_removes(
    db_url: str, tmp_path: Path
) -> None:
    served = await start_served(
        tmp_path, "--db-url", db_url, "--processes", "2", "--instance-id", "reg",
        "--segment-store-heartbeat-s", "0.3", "--segment-store-expiry-s", "3",
    )  # fmt: skip
    port = served.segment_store_port
    assert port is not None
    try:
        assert len(await host_rows(db_url, port)) == 1
        # Several beats of both children on the one row: versions move, nobody re-registers.
        await asyncio.sleep(1.5)
        pids = children(tmp_path)
        # Child 1 stops cleanly on its own (the supervisor restarts it): the address stays.
        os.kill(pids[1], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while children(tmp_path)[1] in (None, pids[1]):
            assert len(await host_rows(db_url, port)) == 1, "the address was deregistered"
            assert time.monotonic() < deadline, "child 1 was not restarted"
            await asyncio.sleep(0.05)
        assert len(await host_rows(db_url, port)) == 1
        assert "registering again" not in served.log()
    finally:
        assert await served.stop() == 0, served.log()
    assert await host_rows(db_url, port) == []
