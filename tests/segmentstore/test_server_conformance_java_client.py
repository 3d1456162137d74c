"""The wire server against what Pravega's Java client sends, over real TCP: its encoder's append
blocks (whole events, a PartialEvent or Padding frame closing each block, queued writers flushed
as blocks of their own) from several writers sharing one connection with KeepAlive and other
requests in between; the decoder's rules on a block closed by another writer or overrunning its
size; the RevisionedStreamClient's ConditionalAppend; KeepAlive among pipelined requests."""

from __future__ import annotations

import random
import struct
from collections import defaultdict

from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from tests.segmentstore.java_encoder import HEADER, JavaEncoder, append_block_header
from tests.segmentstore.server_harness import Client, Connect, event, rid, wid

SEG_A, SEG_B = "sc/java/0.#epoch.0", "sc/java/1.#epoch.0"
MIB = 1024 * 1024


async def whole_segment(c: Client, name: str) -> bytes:
    info = await c.info(name)
    data = bytearray()
    while len(data) < info.write_offset:
        read = await c.read(name, len(data), 2 * MIB)
        assert isinstance(read, wc.SegmentRead), read
        data += read.data
    return bytes(data)


def events_of(data: bytes) -> list[bytes]:
    """The payloads of a segment's framed events; fails on anything but whole type-0 events."""
    payloads, at = [], 0
    while at < len(data):
        type_code, length = HEADER.unpack_from(data, at)
        assert type_code == 0, f"type {type_code} at {at}"
        payloads.append(data[at + 8 : at + 8 + length])
        at += 8 + length
    assert at == len(data)
    return payloads


async def test_a_java_connection_of_three_writers_stores_every_event_once_in_order(client: Client) -> None:
    """Three writers (two on one segment) write 600 events of 10 B to 40 KB through 4 KiB
    blocks, with block timeouts, KeepAlives and info requests in between, all pipelined on one
    connection as Java's encoder frames them; every block end is acknowledged in order with its
    writer's setup request id, and each segment holds each of its writers' events exactly once, in
    the writer's order, never split."""
    await client.create(SEG_A)
    await client.create(SEG_B)
    encoder = JavaEncoder(block_size=4096)
    writers = [(SEG_A, wid()), (SEG_A, wid()), (SEG_B, wid())]
    setup_ids = {}
    for segment, writer in writers:
        setup_ids[writer] = rid()
        encoder.setup_append(setup_ids[writer], writer, segment)
    expected: list[wc.Command | type[wc.Command]] = [wc.AppendSetup] * len(writers)
    # Build the whole conversation first: replies come in request order.
    rng = random.Random(18)
    written: dict[int, list[bytes]] = defaultdict(list)
    numbers = dict.fromkeys(setup_ids, 0)
    block_ends_before = 0
    for step in range(600):
        segment, writer = rng.choice(writers)
        numbers[writer] += 1
        payload = f"{writer:x}:{numbers[writer]}|".encode() + bytes(rng.choice([10, 100, 1000, 5000, 40_000]))
        written[writer].append(payload)
        encoder.append(segment, writer, numbers[writer], event(payload))
        roll = rng.random()
        if roll < 0.1:
            encoder.timeout()
        elif roll < 0.14:
            encoder.command(wc.KeepAlive())
        elif roll < 0.18:
            encoder.command(wc.GetStreamSegmentInfo(rid(), SEG_B, ""))
        # Replies owed so far, in order: a DataAppended per block end, then the command's.
        expected += [wc.DataAppended] * (len(encoder.block_ends) - block_ends_before)
        block_ends_before = len(encoder.block_ends)
        if 0.1 <= roll < 0.14:
            expected.append(wc.KeepAlive())
        elif 0.14 <= roll < 0.18:
            expected.append(wc.StreamSegmentInfo)
        del step
    encoder.timeout()
    expected += [wc.DataAppended] * (len(encoder.block_ends) - block_ends_before)
    frames = bytes(encoder.out)
    # The conversation has every shape Java produces.
    kinds = {(type(e), bool(e.data)) for e in encoder.block_ends}
    assert (wc.AppendBlockEnd, True) in kinds and (wc.AppendBlockEnd, False) in kinds
    assert frames.count(struct.pack(">i", wc.Padding.TYPE)) > 0

    await client.send_raw(frames)
    ends = iter(encoder.block_ends)
    acked: dict[int, int] = {}
    for want in expected:
        reply = await client.recv()
        if isinstance(want, type):
            assert isinstance(reply, want), (want, reply)
        else:
            assert reply == want
        if isinstance(reply, wc.DataAppended):
            end = next(ends)
            assert (reply.writer_id, reply.event_number) == (end.writer_id, end.last_event_number)
            assert reply.request_id == setup_ids[end.writer_id]
            assert acked.get(end.writer_id, wc.NULL_ATTRIBUTE_VALUE) == reply.previous_event_number
            acked[end.writer_id] = reply.event_number
    assert acked == numbers

    for segment in (SEG_A, SEG_B):
        stored = events_of(await whole_segment(client, segment))
        mine = [w for s, w in writers if s == segment]
        for writer in mine:
            prefix = f"{writer:x}:".encode()
            assert [p for p in stored if p.startswith(prefix)] == written[writer]
        assert len(stored) == sum(len(written[w]) for w in mine)


async def test_a_block_closed_by_another_writers_end_closes_the_connection(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG_A)
    first, second = wid(), wid()
    await c.setup(SEG_A, first)
    await c.setup(SEG_A, second)
    data = event(b"x")
    await c.send(wc.AppendBlock(first, data + encode(wc.Padding(0))))
    await c.send(wc.AppendBlockEnd(second, len(data), b"", 1, 1, rid()))
    assert await c.closed_by_server()
    assert (await (await connect()).info(SEG_A)).write_offset == 0


async def test_whole_events_overrunning_the_block_close_the_connection(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG_A)
    writer = wid()
    await c.setup(SEG_A, writer)
    data = event(b"x")
    await c.send_raw(append_block_header(writer, len(data)) + data)
    await c.send(wc.AppendBlockEnd(writer, len(data) + 1, b"", 1, 1, rid()))
    assert await c.closed_by_server()
    assert (await (await connect()).info(SEG_A)).write_offset == 0


async def test_a_partial_event_finished_by_the_block_end_after_whole_events(client: Client) -> None:
    """Java's encoder when an event does not fit the rest of the block: the block ends in a
    PartialEvent with the event's first bytes, the AppendBlockEnd carries the rest."""
    await client.create(SEG_A)
    encoder = JavaEncoder(block_size=64)
    writer, setup_id = wid(), rid()
    encoder.setup_append(setup_id, writer, SEG_A)
    events = [event(b"a" * 20), event(b"b" * 20), event(b"c" * 100)]
    for number, data in enumerate(events, start=1):
        encoder.append(SEG_A, writer, number, data)
    assert [(e.size_of_whole_events, len(e.data), e.num_event) for e in encoder.block_ends] == [
        (56, 108 - 8, 3)
    ]
    await client.send_raw(bytes(encoder.out))
    assert isinstance(await client.recv(), wc.AppendSetup)
    reply = await client.recv()
    assert reply == wc.DataAppended(writer, 3, wc.NULL_ATTRIBUTE_VALUE, setup_id, sum(map(len, events)))
    assert await whole_segment(client, SEG_A) == b"".join(events)


async def test_revisioned_stream_client_conditional_appends(connect: Connect) -> None:
    """Java's RevisionedStreamClient: each ConditionalAppend names the offset it expects; two
    clients racing for one offset: one wins, the other gets ConditionalCheckFailed, keeps its
    connection, and wins at the new offset with its next event number."""
    one, two = await connect(), await connect()
    await one.create(SEG_A)
    w1, w2 = wid(), wid()
    await one.setup(SEG_A, w1)
    await two.setup(SEG_A, w2)
    first = wc.Event(b"state-1")
    won = await one.call(wc.ConditionalAppend(w1, 1, 0, first, rid()))
    assert isinstance(won, wc.DataAppended) and won.current_segment_write_offset == 15
    request_id = rid()
    lost = await two.call(wc.ConditionalAppend(w2, 1, 0, wc.Event(b"state-x"), request_id))
    assert lost == wc.ConditionalCheckFailed(w2, 1, request_id)
    assert await two.call(wc.KeepAlive()) == wc.KeepAlive()
    retried = await two.call(wc.ConditionalAppend(w2, 2, 15, wc.Event(b"state-2"), rid()))
    assert isinstance(retried, wc.DataAppended) and retried.event_number == 2
    assert events_of(await whole_segment(one, SEG_A)) == [b"state-1", b"state-2"]
    # A sealed segment refuses a conditional append like any other.
    await one.expect(wc.SealSegment(rid(), SEG_A, ""), wc.SegmentSealed)
    request_id = rid()
    sealed = await one.call(wc.ConditionalAppend(w1, 2, 30, wc.Event(b"late"), request_id))
    assert sealed == wc.SegmentIsSealed(request_id, SEG_A, "", 2)


async def test_keepalives_among_pipelined_requests_are_echoed_in_place(client: Client) -> None:
    """Java sends KeepAlive whenever its connection idles; a KeepAlive pipelined between other
    requests is answered in its place, with no request id of its own."""
    await client.create(SEG_A)
    writer = wid()
    await client.setup(SEG_A, writer)
    assert isinstance(await client.append(writer, event(b"x"), 1), wc.DataAppended)
    ids = [rid() for _ in range(3)]
    frames = b"".join(
        [
            encode(wc.KeepAlive()),
            encode(wc.GetStreamSegmentInfo(ids[0], SEG_A, "")),
            encode(wc.KeepAlive()),
            encode(wc.GetSegmentAttribute(ids[1], SEG_A, wid(), "")),
            encode(wc.KeepAlive()),
            encode(wc.ReadSegment(SEG_A, 0, 100, "", ids[2])),
        ]
    )
    await client.send_raw(frames)
    replies = [await client.recv() for _ in range(6)]
    assert replies[0] == replies[2] == replies[4] == wc.KeepAlive()
    assert [type(r) for r in replies[1::2]] == [wc.StreamSegmentInfo, wc.SegmentAttribute, wc.SegmentRead]
    assert [getattr(r, "request_id", None) for r in replies[1::2]] == ids
    await client.nothing_within(0.2)


async def test_a_frame_of_exactly_the_largest_size_is_taken(client: Client) -> None:
    """A ConditionalBlockEnd whose payload is MAX_WIRECOMMAND_SIZE bytes (the largest frame the
    protocol allows; one byte more closes the connection) is stored whole."""
    await client.create(SEG_A)
    writer = wid()
    await client.setup(SEG_A, writer)
    overhead = len(encode(wc.ConditionalBlockEnd(writer, 0, 0, b"", 1))) - HEADER.size
    data = bytes(range(256)) * ((wc.MAX_WIRECOMMAND_SIZE - overhead) // 256 + 1)
    data = data[: wc.MAX_WIRECOMMAND_SIZE - overhead]
    frame = encode(wc.ConditionalBlockEnd(writer, 0, 0, data, rid()))
    assert HEADER.unpack_from(frame)[1] == wc.MAX_WIRECOMMAND_SIZE
    await client.send_raw(frame)
    reply = await client.recv()
    assert isinstance(reply, wc.DataAppended) and reply.current_segment_write_offset == len(data), reply
    assert await whole_segment(client, SEG_A) == data
