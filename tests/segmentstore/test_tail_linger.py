"""Issue 33: a read answering with a segment's newest bytes lingers for the writer's next append
(`tail_linger_s`, tails.py). Pravega's clients keep one append block in flight per segment and send
the next when the ack comes, so two events written together reach the store one commit apart; a
reader at the tail gets both in one reply when its read waits for the second, and only the first
when it does not. Over real TCP and PostgreSQL, with the raw codec client: the writer sends its
second append the moment its first is acknowledged, as the Rust client does."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from tests.segmentstore.server_harness import Client, ServerFactory, event, rid, wid

SEG = "linger/s/0.#epoch.0"
# Generous for a loaded CI machine: the second append arrives well within it (it is sent the
# moment the first's ack arrives), and a test that waits it out says so in its timing.
LINGER_S = 0.25


async def _segment_with_writer(c: Client) -> tuple[int, int]:
    """SEG with one event written; (the writer id, the segment's length)."""
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    first = event(b"before")
    assert isinstance(await c.append(writer, first, 1), wc.DataAppended)
    return writer, len(first)


@dataclass
class Pair:
    """A server with a writer's connection (SEG created, one event in) and a reader's."""

    server: SegmentStoreServer
    writer_conn: Client
    reader: Client
    writer: int
    tail: int

    async def parked(self, offset: int) -> None:
        """Sends a read at `offset` and waits until it is parked at the tail."""
        await self.reader.send(wc.ReadSegment(SEG, offset, 1 << 20, "", rid()))
        while self.server.parked_reads() < 1:
            await self.reader.nothing_within(0.01)


@asynccontextmanager
async def _pair(start_server: ServerFactory, linger_s: float) -> AsyncIterator[Pair]:
    server = await start_server(tail_linger_s=linger_s)
    writer_conn, reader = await Client.connect(server.address), await Client.connect(server.address)
    try:
        writer, tail = await _segment_with_writer(writer_conn)
        yield Pair(server, writer_conn, reader, writer, tail)
    finally:
        await writer_conn.close()
        await reader.close()


async def _two_appends_one_ack_apart(c: Client, writer: int, first: bytes, second: bytes) -> None:
    assert isinstance(await c.append(writer, first, 2), wc.DataAppended)
    assert isinstance(await c.append(writer, second, 3), wc.DataAppended)


@pytest.mark.parametrize(
    ("linger_s", "read"),
    [(LINGER_S, "both"), (0.0, "the first alone")],
    ids=["with the linger", "without: the contrast"],
)
async def test_a_parked_read_gets_both_appends_a_writer_sent_one_ack_apart(
    start_server: ServerFactory, linger_s: float, read: str
) -> None:
    """Without the linger the reply leaves as the first commit wakes the read, long before the
    writer, which waits for its ack, could have sent the second."""
    async with _pair(start_server, linger_s) as pair:
        await pair.parked(pair.tail)
        first, second = event(b"one"), event(b"two")
        await _two_appends_one_ack_apart(pair.writer_conn, pair.writer, first, second)
        reply = await pair.reader.recv()
        assert isinstance(reply, wc.SegmentRead), reply
        expected = first + second if read == "both" else first
        assert (reply.offset, reply.data, reply.at_tail) == (pair.tail, expected, True)


async def test_a_read_arriving_just_after_an_append_waits_for_the_next(start_server: ServerFactory) -> None:
    async with _pair(start_server, LINGER_S) as pair:
        first, second = event(b"one"), event(b"two")
        assert isinstance(await pair.writer_conn.append(pair.writer, first, 2), wc.DataAppended)
        # The read comes after the first append committed, and the second follows it.
        await pair.reader.send(wc.ReadSegment(SEG, pair.tail, 1 << 20, "", rid()))
        assert isinstance(await pair.writer_conn.append(pair.writer, second, 3), wc.DataAppended)
        reply = await pair.reader.recv()
        assert isinstance(reply, wc.SegmentRead), reply
        assert reply.data == first + second


async def test_a_lone_append_reaches_its_reader_after_the_linger_at_most(start_server: ServerFactory) -> None:
    async with _pair(start_server, LINGER_S) as pair:
        await pair.parked(pair.tail)
        lone = event(b"alone")
        acked_at = time.monotonic()
        assert isinstance(await pair.writer_conn.append(pair.writer, lone, 2), wc.DataAppended)
        reply = await pair.reader.recv()
        waited = time.monotonic() - acked_at
        assert isinstance(reply, wc.SegmentRead), reply
        assert reply.data == lone
        # It waited for a second append that never came, and no longer than that.
        assert LINGER_S * 0.8 <= waited < LINGER_S + 2.0, waited


async def test_reads_of_bytes_not_written_just_now_and_seals_do_not_linger(
    start_server: ServerFactory,
) -> None:
    linger_s = 1.0
    server = await start_server(tail_linger_s=linger_s)
    c = await Client.connect(server.address)
    try:
        _, tail = await _segment_with_writer(c)
        await c.nothing_within(linger_s * 1.2)
        # Written longer ago than the linger: a read of them, up to the tail, answers at once.
        started = time.monotonic()
        await c.send(wc.ReadSegment(SEG, 0, 1 << 20, "", rid()))
        reply = await c.recv()
        assert isinstance(reply, wc.SegmentRead) and reply.data == event(b"before"), reply
        assert time.monotonic() - started < linger_s / 2
        # A parked read woken by a seal answers at once.
        read_id = rid()
        await c.send(wc.ReadSegment(SEG, tail, 1 << 20, "", read_id))
        while server.parked_reads() < 1:
            await c.nothing_within(0.01)
        started = time.monotonic()
        await c.send(wc.SealSegment(rid(), SEG, ""))
        replies = [await c.recv(), await c.recv()]
        assert time.monotonic() - started < linger_s / 2
        sealed = [r for r in replies if isinstance(r, wc.SegmentIsSealed)]
        assert [r.request_id for r in sealed] == [read_id], replies
    finally:
        await c.close()
