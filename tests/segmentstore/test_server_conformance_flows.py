"""A Java client's connection over real TCP: many flows (segment readers, segment writers, table
and admin calls) share one connection, each flow's request ids carrying its flow id in the upper
32 bits. Reads parked at segment tails never hold the other flows: everything else on the same
connection is answered while they wait, each reply with its own request id, and each parked read
answers only when its own segment changes."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator

import pytest

from app.segmentstore.server import SegmentStoreServer, connection
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from tests.segmentstore.server_harness import Client, ServerFactory, event, wid

MIB = 1024 * 1024
TAIL_WAIT_S = 30.0  # far beyond the test: a parked read answering early would be a bug


class Flow:
    """Java's Flow: request id = flow id << 32 | the flow's next sequence number."""

    _ids = itertools.count(1)

    def __init__(self) -> None:
        self.id = next(Flow._ids)
        self._sequence: Iterator[int] = itertools.count(1)

    def next(self) -> int:
        return (self.id << 32) | next(self._sequence)


async def create_with(c: Client, flow: Flow, name: str, payload: bytes) -> int:
    """Creates `name` holding one event of `payload`; returns the segment's length."""
    await c.expect(wc.CreateSegment(flow.next(), name, 0, 0, ""), wc.SegmentCreated)
    writer = wid()
    await c.expect(wc.SetupAppend(flow.next(), writer, name, ""), wc.AppendSetup)
    data = event(payload)
    reply = await c.call(wc.AppendBlockEnd(writer, len(data), data, 1, 1, flow.next()))
    assert isinstance(reply, wc.DataAppended), reply
    return len(data)


async def test_tail_reads_never_hold_the_other_flows_of_their_connection(
    start_server: ServerFactory,
) -> None:
    server = await start_server(tail_wait_s=TAIL_WAIT_S)
    c = await Client.connect(server.address)
    other = await Client.connect(server.address)
    try:
        admin = Flow()
        first, second, third = "sc/st/0.#epoch.0", "sc/st/1.#epoch.0", "sc/st/2.#epoch.0"
        end1 = await create_with(c, admin, first, b"one")
        end2 = await create_with(c, admin, second, b"two")
        end3 = await create_with(c, admin, third, b"three")
        await c.expect(wc.CreateTableSegment(admin.next(), "sc/_tables", "", False, 0, 0), wc.SegmentCreated)

        # Two segment readers of this connection park at their segments' tails.
        reader1, reader2 = Flow(), Flow()
        read1, read2 = reader1.next(), reader2.next()
        await c.send(wc.ReadSegment(first, end1, MIB, "", read1))
        await c.send(wc.ReadSegment(second, end2, MIB, "", read2))

        # Every other kind of request on the same connection answers at once, in order.
        started = time.monotonic()
        flow = Flow()
        request_id = flow.next()
        info = await c.call(wc.GetStreamSegmentInfo(request_id, third, ""))
        assert isinstance(info, wc.StreamSegmentInfo), info
        assert (info.request_id, info.write_offset) == (request_id, end3)
        request_id = flow.next()
        read = await c.call(wc.ReadSegment(third, 0, MIB, "", request_id))
        assert read == wc.SegmentRead(third, 0, True, False, event(b"three"), request_id)
        request_id = flow.next()
        updated = await c.call(
            wc.UpdateTableEntries(
                request_id,
                "sc/_tables",
                "",
                ((wc.TableKey(b"k", wc.TABLE_KEY_NOT_EXISTS), wc.TableValue(b"v")),),
                wc.NULL_TABLE_SEGMENT_OFFSET,
            )
        )
        assert isinstance(updated, wc.TableEntriesUpdated) and updated.request_id == request_id, updated
        request_id = flow.next()
        table = await c.call(wc.ReadTable(request_id, "sc/_tables", "", (wc.TableKey(b"k", -1),)))
        assert isinstance(table, wc.TableRead) and table.request_id == request_id, table
        assert table.entries[0][1] == wc.TableValue(b"v")
        request_id = flow.next()
        attribute = await c.call(wc.GetSegmentAttribute(request_id, third, wid(), ""))
        assert attribute == wc.SegmentAttribute(request_id, wc.NULL_ATTRIBUTE_VALUE)
        assert await c.call(wc.KeepAlive()) == wc.KeepAlive()
        # A segment writer flow appends, Java style (an AppendBlock closed by its block end).
        writer_flow, writer = Flow(), wid()
        request_id = writer_flow.next()
        setup = await c.call(wc.SetupAppend(request_id, writer, third, ""))
        assert setup == wc.AppendSetup(request_id, third, writer, wc.NULL_ATTRIBUTE_VALUE)
        data = event(b"four") + event(b"five")
        await c.send(wc.AppendBlock(writer, data + encode(wc.Padding(16))))
        request_id = writer_flow.next()
        appended = await c.call(wc.AppendBlockEnd(writer, len(data), b"", 2, 2, request_id))
        assert appended == wc.DataAppended(writer, 2, wc.NULL_ATTRIBUTE_VALUE, request_id, end3 + len(data))
        # The whole round took a fraction of the tail wait: nothing queued behind the reads.
        assert time.monotonic() - started < TAIL_WAIT_S / 3

        # Another connection appends to the first segment: only its reader answers.
        other_flow, other_writer = Flow(), wid()
        await other.expect(wc.SetupAppend(other_flow.next(), other_writer, first, ""), wc.AppendSetup)
        more = event(b"more")
        await other.expect(
            wc.AppendBlockEnd(other_writer, len(more), more, 1, 2, other_flow.next()), wc.DataAppended
        )
        woken = await c.recv()
        assert woken == wc.SegmentRead(first, end1, True, False, more, read1)
        await c.nothing_within(0.2)

        # This connection appends to the second segment: its DataAppended and the second
        # reader's answer both come (in either order), each with its own request id.
        writer2 = wid()
        await c.expect(wc.SetupAppend(writer_flow.next(), writer2, second, ""), wc.AppendSetup)
        append_id = writer_flow.next()
        await c.send(wc.AppendBlockEnd(writer2, len(more), more, 1, 1, append_id))
        replies = {type(r): r for r in [await c.recv(), await c.recv()]}
        assert replies[wc.SegmentRead] == wc.SegmentRead(second, end2, True, False, more, read2)
        assert replies[wc.DataAppended].request_id == append_id
    finally:
        await c.close()
        await other.close()


async def test_many_parked_reads_on_one_connection_answer_independently(
    start_server: ServerFactory,
) -> None:
    """Twenty reader flows park on twenty segments; appends to every other segment wake exactly
    those readers, and the rest still wait while the connection keeps answering."""
    server = await start_server(tail_wait_s=TAIL_WAIT_S)
    c = await Client.connect(server.address)
    try:
        admin = Flow()
        names = [f"sc/many/{n}.#epoch.0" for n in range(20)]
        ends = [await create_with(c, admin, name, b"x") for name in names]
        readers = [Flow() for _ in names]
        read_ids = [flow.next() for flow in readers]
        for name, end, request_id in zip(names, ends, read_ids, strict=True):
            await c.send(wc.ReadSegment(name, end, MIB, "", request_id))
        writer_flow = Flow()
        woken: dict[int, wc.Command] = {}
        for n in range(0, len(names), 2):
            writer = wid()
            await c.send(wc.SetupAppend(writer_flow.next(), writer, names[n], ""))
            assert isinstance(await c.recv(), wc.AppendSetup)
            data = event(f"woke {n}".encode())
            await c.send(wc.AppendBlockEnd(writer, len(data), data, 1, 1, writer_flow.next()))
            for _ in range(2):
                reply = await c.recv()
                if isinstance(reply, wc.SegmentRead):
                    woken[reply.request_id] = reply
                else:
                    assert isinstance(reply, wc.DataAppended), reply
        assert sorted(woken) == sorted(read_ids[0::2])
        for n in range(0, len(names), 2):
            reply = woken[read_ids[n]]
            assert isinstance(reply, wc.SegmentRead)
            assert (reply.segment, reply.offset, reply.data) == (
                names[n],
                ends[n],
                event(f"woke {n}".encode()),
            )
        # The odd readers still wait; the connection still answers.
        assert await c.call(wc.KeepAlive()) == wc.KeepAlive()
        await c.nothing_within(0.2)
    finally:
        await c.close()


def buffered_for_peers(server: SegmentStoreServer) -> int:
    """Bytes the server's connections hold unsent (reaching into the server: nothing on the
    wire shows how much it buffers for a peer that does not read)."""
    connections = server._connections.values()
    return sum(c._writer.transport.get_write_buffer_size() for c in connections)


async def test_reads_woken_together_for_a_peer_that_does_not_read_buffer_one_reply(
    start_server: ServerFactory,
) -> None:
    """Sixteen reads park on one connection whose peer then stops reading; 2 MiB lands on each
    segment at once. The server reads and buffers one 2 MiB reply at a time for that peer (not
    all sixteen); once the peer reads again every reply arrives, whole and in turn."""
    server = await start_server(tail_wait_s=TAIL_WAIT_S)
    lazy = await Client.connect(server.address)
    busy = await Client.connect(server.address)
    try:
        admin = Flow()
        names = [f"sc/lazy/{n}.#epoch.0" for n in range(16)]
        ends = [await create_with(busy, admin, name, b"x") for name in names]
        read_ids = [Flow().next() for _ in names]
        for name, end, request_id in zip(names, ends, read_ids, strict=True):
            await lazy.send(wc.ReadSegment(name, end, 2 * MIB, "", request_id))
        big = event(bytes(2 * MIB - 8))
        for name in names:
            writer = wid()
            await busy.expect(wc.SetupAppend(admin.next(), writer, name, ""), wc.AppendSetup)
            await busy.expect(wc.AppendBlockEnd(writer, len(big), big, 1, 1, admin.next()), wc.DataAppended)
        # Every read has woken; the unread replies beyond what the sockets took stay bounded.
        peak = 0
        for _ in range(25):
            peak = max(peak, buffered_for_peers(server))
            await asyncio.sleep(0.02)
        assert 0 < peak <= 2 * MIB + 128 * 1024, peak
        answers = {}
        for _ in names:
            reply = await lazy.recv()
            assert isinstance(reply, wc.SegmentRead), reply
            answers[reply.request_id] = reply
        assert sorted(answers) == sorted(read_ids)
        assert all(len(r.data) == 2 * MIB for r in answers.values())
    finally:
        await lazy.close()
        await busy.close()


async def test_reads_beyond_the_parking_limit_answer_at_once_as_an_expired_wait(
    start_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection parks at most MAX_PARKED_READS reads (here lowered to 4); a fifth tail read
    answers at once, empty and at the tail, and the four parked ones still answer with data."""
    monkeypatch.setattr(connection, "MAX_PARKED_READS", 4)
    server = await start_server(tail_wait_s=TAIL_WAIT_S)
    c = await Client.connect(server.address)
    try:
        flow = Flow()
        name = "sc/cap/0.#epoch.0"
        end = await create_with(c, flow, name, b"x")
        parked = [flow.next() for _ in range(4)]
        for request_id in parked:
            await c.send(wc.ReadSegment(name, end, MIB, "", request_id))
        extra = flow.next()
        assert await c.call(wc.ReadSegment(name, end, MIB, "", extra)) == wc.SegmentRead(
            name, end, True, False, b"", extra
        )
        writer = wid()
        await c.expect(wc.SetupAppend(flow.next(), writer, name, ""), wc.AppendSetup)
        data = event(b"y")
        await c.send(wc.AppendBlockEnd(writer, len(data), data, 1, 1, flow.next()))
        replies = [await c.recv() for _ in range(5)]
        reads = {r.request_id: r for r in replies if isinstance(r, wc.SegmentRead)}
        assert sorted(reads) == sorted(parked)
        assert all(r.data == data for r in reads.values())
    finally:
        await c.close()
