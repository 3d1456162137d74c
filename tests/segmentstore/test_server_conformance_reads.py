"""The wire server's reads over real TCP: the 2 MiB cap and echoed offset, the at_tail and
end_of_segment flags, truncated, sealed and missing segments, and reads parked at the tail:
woken by an append, a seal or a deletion, answered empty after tail_wait_s, never holding their
connection's other requests, and all answered when the server closes."""

from __future__ import annotations

import asyncio
import time

from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from tests.segmentstore.server_harness import Client, Connect, ServerFactory, event, rid, wid

SEG = "sc/st/0.#epoch.0"
MIB = 1024 * 1024


async def filled(c: Client, name: str, payload: bytes) -> int:
    """Creates `name` holding one event of `payload`; returns its writer id."""
    await c.create(name)
    writer = wid()
    await c.setup(name, writer)
    assert isinstance(await c.append(writer, event(payload), 1), wc.DataAppended)
    return writer


async def test_read_mid_data_is_capped_and_echoes_the_offset(client: Client) -> None:
    payload = bytes(range(256)) * (3 * 4096)  # 3 MiB
    await filled(client, SEG, payload)
    data = event(payload)
    request_id = rid()
    reply = await client.call(wc.ReadSegment(SEG, 100, 8 * MIB, "", request_id))
    assert reply == wc.SegmentRead(SEG, 100, False, False, data[100 : 100 + 2 * MIB], request_id)
    small = await client.read(SEG, 5, 10)
    assert isinstance(small, wc.SegmentRead) and small.offset == 5 and small.data == data[5:15]
    # At least 8 bytes are read whatever the suggestion.
    tiny = await client.read(SEG, 0, 1)
    assert isinstance(tiny, wc.SegmentRead) and tiny.data == data[:8]
    last_id = rid()
    last = await client.call(wc.ReadSegment(SEG, len(data) - 4, 100, "", last_id))
    assert last == wc.SegmentRead(SEG, len(data) - 4, True, False, data[-4:], last_id)


async def test_a_tail_read_waits_for_an_append(connect: Connect) -> None:
    reader, writer_conn = await connect(), await connect()
    writer = await filled(writer_conn, SEG, b"first")
    tail = 8 + 5
    request_id = rid()
    await reader.send(wc.ReadSegment(SEG, tail, MIB, "", request_id))
    await reader.nothing_within(0.3)
    assert isinstance(await writer_conn.append(writer, event(b"second"), 2), wc.DataAppended)
    reply = await reader.recv()
    assert reply == wc.SegmentRead(SEG, tail, True, False, event(b"second"), request_id)


async def test_a_tail_read_without_append_answers_empty_after_the_wait(start_server: ServerFactory) -> None:
    server = await start_server(tail_wait_s=0.3)
    c = await Client.connect(server.address)
    try:
        await filled(c, SEG, b"x")
        started = time.monotonic()
        request_id = rid()
        reply = await c.call(wc.ReadSegment(SEG, 9, MIB, "", request_id))
        waited = time.monotonic() - started
        assert reply == wc.SegmentRead(SEG, 9, True, False, b"", request_id)
        assert 0.25 <= waited < 5
    finally:
        await c.close()


async def test_a_tail_read_does_not_hold_other_requests_of_its_connection(client: Client) -> None:
    await filled(client, SEG, b"x")
    other = "sc/st/1.#epoch.0"
    await client.create(other)
    read_id = rid()
    await client.send(wc.ReadSegment(SEG, 9, MIB, "", read_id))
    # The same connection sets up a writer and appends while the read is parked.
    writer = wid()
    assert await client.setup(other, writer) == wc.NULL_ATTRIBUTE_VALUE
    appended = await client.append(writer, event(b"y"), 1)
    assert isinstance(appended, wc.DataAppended)
    assert await client.call(wc.KeepAlive()) == wc.KeepAlive()
    # Now wake the parked read with an append to its own segment, from the same connection.
    writer2 = wid()
    await client.setup(SEG, writer2)
    await client.send(wc.AppendBlockEnd(writer2, 9, event(b"z"), 1, 1, rid()))
    replies = [await client.recv(), await client.recv()]
    kinds = sorted(type(r).__name__ for r in replies)
    assert kinds == ["DataAppended", "SegmentRead"]
    read = next(r for r in replies if isinstance(r, wc.SegmentRead))
    assert read.request_id == read_id and read.data == event(b"z")


async def test_a_seal_during_a_tail_read_is_segment_is_sealed(connect: Connect) -> None:
    reader, admin = await connect(), await connect()
    await filled(admin, SEG, b"x")
    request_id = rid()
    await reader.send(wc.ReadSegment(SEG, 9, MIB, "", request_id))
    await reader.nothing_within(0.2)
    await admin.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    assert await reader.recv() == wc.SegmentIsSealed(request_id, SEG, "", 9)


async def test_a_deletion_during_a_tail_read_is_no_such_segment(connect: Connect) -> None:
    reader, admin = await connect(), await connect()
    await filled(admin, SEG, b"x")
    request_id = rid()
    await reader.send(wc.ReadSegment(SEG, 9, MIB, "", request_id))
    await reader.nothing_within(0.2)
    await admin.expect(wc.DeleteSegment(rid(), SEG, ""), wc.SegmentDeleted)
    reply = await reader.recv()
    assert isinstance(reply, wc.NoSuchSegment) and reply.request_id == request_id


async def test_a_merge_into_the_segment_wakes_its_tail_read(connect: Connect) -> None:
    reader, admin = await connect(), await connect()
    await filled(admin, SEG, b"x")
    txn = f"{SEG}#transaction.{wid():032x}"
    await filled(admin, txn, b"txn")
    request_id = rid()
    await reader.send(wc.ReadSegment(SEG, 9, MIB, "", request_id))
    await reader.nothing_within(0.2)
    await admin.expect(wc.MergeSegmentsBatch(rid(), SEG, (txn,), ""), wc.SegmentsBatchMerged)
    assert await reader.recv() == wc.SegmentRead(SEG, 9, True, False, event(b"txn"), request_id)


async def test_reads_at_and_past_the_sealed_end(client: Client) -> None:
    await filled(client, SEG, b"abc")
    await client.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    request_id = rid()
    assert await client.call(wc.ReadSegment(SEG, 11, MIB, "", request_id)) == wc.SegmentRead(
        SEG, 11, False, True, b"", request_id
    )
    # Data reaching the sealed end carries end_of_segment.
    last = await client.read(SEG, 8, MIB)
    assert (
        isinstance(last, wc.SegmentRead) and last.data == b"abc" and last.end_of_segment and not last.at_tail
    )
    beyond = await client.read(SEG, 12, MIB)
    assert isinstance(beyond, wc.ErrorMessage) and beyond.segment == SEG and beyond.error_code == 0


async def test_a_read_below_the_start_is_segment_is_truncated(client: Client) -> None:
    await filled(client, SEG, b"abcdef")
    await client.expect(wc.TruncateSegment(rid(), SEG, 10, ""), wc.SegmentTruncated)
    request_id = rid()
    reply = await client.call(wc.ReadSegment(SEG, 3, MIB, "", request_id))
    assert reply == wc.SegmentIsTruncated(request_id, SEG, 10, "", 3)
    ok = await client.read(SEG, 10, MIB)
    assert isinstance(ok, wc.SegmentRead) and ok.data == b"cdef"


async def test_a_read_of_a_missing_segment_is_no_such_segment(client: Client) -> None:
    request_id = rid()
    reply = await client.call(wc.ReadSegment(SEG, 0, MIB, "", request_id))
    assert isinstance(reply, wc.NoSuchSegment) and reply.request_id == request_id and reply.segment == SEG


async def test_close_answers_parked_reads_and_returns_promptly(start_server: ServerFactory) -> None:
    server: SegmentStoreServer = await start_server(tail_wait_s=60.0)
    clients = [await Client.connect(server.address) for _ in range(3)]
    try:
        await filled(clients[0], SEG, b"x")
        ids = [rid() for _ in clients]
        for c, request_id in zip(clients, ids, strict=True):
            await c.send(wc.ReadSegment(SEG, 9, MIB, "", request_id))
        await clients[0].nothing_within(0.2)
        started = time.monotonic()
        await asyncio.wait_for(server.close(), 5)
        assert time.monotonic() - started < 2
        for c, request_id in zip(clients, ids, strict=True):
            assert await c.recv() == wc.SegmentRead(SEG, 9, True, False, b"", request_id)
            assert await c.closed_by_server()
    finally:
        for c in clients:
            await c.close()
