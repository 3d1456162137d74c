"""Reads parked at a segment's tail over real TCP and PostgreSQL: one append wakes only the reads
its bytes reach, and the woken reads are answered from the read index, so the append costs a
constant number of database statements however many reads are parked; the index stays within
its budgets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.clock import SystemClock
from app.metrics.registry import REGISTRY
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.read_index import CHUNK_OVERHEAD_BYTES, ReadIndex
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from app.store.db import PgDatabase
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import Client, event, rid, wid

SEG = "sc/st/0.#epoch.0"
MIB = 1024 * 1024
# Reads parked on one segment, over connections of at most 1,024 parked reads each (the cap).
PARKED = 4096
CONNECTIONS = 4
# Statements an append and its wake-ups may cost: the append's own, and a few to spare.
STATEMENTS_PER_APPEND = 4
# Reads parked at each of two offsets past the segment's end.
BEYOND = 100
_COUNTED = frozenset({"fetch", "fetchrow", "fetchval", "execute", "executemany", "transaction"})


class CountedDatabase:
    """The storage's database, counting every statement (and transaction) it is asked for."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db
        self.statements = 0

    def __getattr__(self, name: str) -> Any:
        if name in _COUNTED:
            self.statements += 1
        return getattr(self._db, name)


@pytest.fixture
def counted(database: PgDatabase) -> CountedDatabase:
    return CountedDatabase(database)


@pytest.fixture
async def store(counted: CountedDatabase) -> AsyncIterator[SegmentStoreServer]:
    storage = PgSegmentStorage(counted, SystemClock())  # type: ignore[arg-type]
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=60.0)
    try:
        yield server
    finally:
        await server.close()


def _db_reads(server: SegmentStoreServer) -> float:
    labels = {"store": f"{server.address[0]}:{server.address[1]}"}
    return REGISTRY.get_sample_value("pgcontroller_segmentstore_db_reads_total", labels) or 0.0


async def _parked(server: SegmentStoreServer, count: int) -> None:
    deadline = time.monotonic() + 60
    while server.parked_reads() < count:
        assert time.monotonic() < deadline, f"{server.parked_reads()} reads parked, not {count}"
        await asyncio.sleep(0.05)


async def _writer(c: Client, payload: bytes) -> tuple[int, int]:
    """Creates SEG holding one event of `payload`; (its writer id, its length)."""
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    first = event(payload)
    reply = await c.append(writer, first, 1)
    assert isinstance(reply, wc.DataAppended), reply
    return writer, len(first)


async def _send_reads(c: Client, offset: int, count: int) -> dict[int, int]:
    """Pipelines `count` tail reads at `offset`; request id -> offset."""
    reads = {rid(): offset for _ in range(count)}
    c.writer.write(b"".join(_read_frame(request_id, offset) for request_id in reads))
    await c.writer.drain()
    return reads


def _read_frame(request_id: int, offset: int) -> bytes:
    return encode(wc.ReadSegment(SEG, offset, MIB, "", request_id))


async def test_one_append_answers_4096_parked_reads_with_constant_database_work(
    store: SegmentStoreServer, counted: CountedDatabase
) -> None:
    writer_conn = await Client.connect(store.address)
    readers = [await Client.connect(store.address) for _ in range(CONNECTIONS)]
    try:
        writer, tail = await _writer(writer_conn, b"first")
        pending = [await _send_reads(c, tail, PARKED // CONNECTIONS) for c in readers]
        await _parked(store, PARKED)
        statements, db_reads = counted.statements, _db_reads(store)

        second = event(b"second")
        assert isinstance(await writer_conn.append(writer, second, 2), wc.DataAppended)
        for c, reads in zip(readers, pending, strict=True):
            for _ in range(len(reads)):
                reply = await c.recv(timeout_s=60)
                assert isinstance(reply, wc.SegmentRead), reply
                assert reads.pop(reply.request_id) == reply.offset == tail
                assert (reply.data, reply.at_tail, reply.end_of_segment) == (second, True, False)
            assert reads == {}
        assert store.parked_reads() == 0

        caused = counted.statements - statements
        assert caused <= STATEMENTS_PER_APPEND, f"one append cost {caused} statements"
        assert _db_reads(store) - db_reads == 0
    finally:
        for c in [writer_conn, *readers]:
            await c.close()


async def test_reads_parked_beyond_an_append_stay_parked_until_bytes_reach_them(
    store: SegmentStoreServer, counted: CountedDatabase
) -> None:
    writer_conn = await Client.connect(store.address)
    reader = await Client.connect(store.address)
    try:
        writer, tail = await _writer(writer_conn, b"first")
        second, third = event(b"second"), event(b"third!")
        beyond = tail + len(second)  # where the third event will start
        far = beyond + len(third)  # past the third event too
        at_tail = rid()
        await reader.send(wc.ReadSegment(SEG, tail, MIB, "", at_tail))
        at_beyond = await _send_reads(reader, beyond, BEYOND)
        at_far = await _send_reads(reader, far, BEYOND)
        await _parked(store, 1 + 2 * BEYOND)

        statements = counted.statements
        assert isinstance(await writer_conn.append(writer, second, 2), wc.DataAppended)
        assert await reader.recv() == wc.SegmentRead(SEG, tail, True, False, second, at_tail)
        # The others are beyond the new length: not woken (no read of theirs reaches the
        # database), still parked, nothing sent.
        await reader.nothing_within(0.5)
        assert counted.statements - statements == 1, "the append's own statement, nothing else"
        assert store.parked_reads() == 2 * BEYOND

        statements = counted.statements
        assert isinstance(await writer_conn.append(writer, third, 3), wc.DataAppended)
        for _ in range(BEYOND):
            reply = await reader.recv()
            assert isinstance(reply, wc.SegmentRead) and reply.request_id in at_beyond, reply
            assert (reply.offset, reply.data, reply.at_tail) == (beyond, third, True)
            del at_beyond[reply.request_id]
        await reader.nothing_within(0.5)
        assert counted.statements - statements == 1
        assert store.parked_reads() == BEYOND

        # A seal wakes every read parked on the segment, wherever it waits.
        await writer_conn.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
        for _ in range(BEYOND):
            reply = await reader.recv()
            assert isinstance(reply, wc.SegmentIsSealed) and reply.request_id in at_far, reply
            assert reply.offset == far
        assert store.parked_reads() == 0
    finally:
        await writer_conn.close()
        await reader.close()


async def test_the_read_index_stays_within_its_budgets_over_many_segments(
    storage: PgSegmentStorage,
) -> None:
    segment_bytes, total_bytes = 64 * 1024, 512 * 1024
    index = ReadIndex(segment_bytes, total_bytes)
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=5.0, read_index=index)
    c = await Client.connect(server.address)
    try:
        segments = [f"sc/budget/{i}.#epoch.0" for i in range(40)]
        writers: dict[str, int] = {}
        for name in segments:
            await c.create(name)
            writers[name] = wid()
            await c.setup(name, writers[name])
        payload = bytes(range(256)) * 16  # 4 KiB per event
        for round_number in range(1, 31):
            for name in segments:
                reply = await c.append(writers[name], event(payload), round_number)
                assert isinstance(reply, wc.DataAppended), reply
                assert index.cost <= total_bytes
            assert isinstance(reply, wc.DataAppended)
            last = index.span(segments[-1])
            assert last is not None and last[1] == reply.current_segment_write_offset
            for name in segments:
                span = index.span(name)
                if span is not None:
                    assert (span[1] - span[0]) + CHUNK_OVERHEAD_BYTES <= segment_bytes
        # 40 segments of 120 KiB each, appended in turn: the least recently used entries went
        # whole, so the budget is used up to less than one segment's budget.
        chunk_cost = len(event(payload)) + CHUNK_OVERHEAD_BYTES
        assert total_bytes - segment_bytes - chunk_cost < index.cost <= total_bytes
        # One segment appended alone fills its own budget and no more.
        for event_number in range(31, 61):
            assert isinstance(
                await c.append(writers[segments[0]], event(payload), event_number), wc.DataAppended
            )
        span = index.span(segments[0])
        assert span is not None
        kept = (span[1] - span[0]) // len(event(payload))
        assert kept == segment_bytes // chunk_cost and index.cost <= total_bytes
        # What it answers is still what PostgreSQL holds, and what it dropped comes from PostgreSQL.
        for name in (segments[0], segments[-1]):
            length = (60 if name == segments[0] else 30) * len(event(payload))
            for offset in (0, length - 100, length - 5000):
                from_server = await c.read(name, offset, 8192)
                stored = await storage.read(name, offset, 8192)
                assert isinstance(from_server, wc.SegmentRead)
                assert from_server.data == stored.data
                assert from_server.at_tail == (offset + len(stored.data) >= stored.length)
    finally:
        await c.close()
        await server.close()
