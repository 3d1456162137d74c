"""The wire server's append path over real TCP: SetupAppend, AppendBlockEnd with and without a
Java AppendBlock, the append decoder's rules (violations close the connection), conditional
appends, sealed and deleted segments, de-duplication on reconnect, durability across a restart,
concurrent writers, and large events through a transient segment."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.clock import SystemClock
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from app.store.db import PgDatabase
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import (
    Client,
    ServerFactory,
    event,
    rid,
    wid,
)

Connect = Callable[..., Awaitable[Client]]
SEG = "sc/st/0.#epoch.0"
MIN = wc.NULL_ATTRIBUTE_VALUE


async def segment_bytes(c: Client, name: str) -> bytes:
    info = await c.info(name)
    read = await c.read(name, info.start_offset, 2 * 1024 * 1024)
    assert isinstance(read, wc.SegmentRead), read
    return read.data


async def test_setup_append_reports_the_stored_event_number(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    assert await client.setup(SEG, writer) == MIN
    appended = await client.append(writer, event(b"one") + event(b"two"), 2, num_event=2)
    assert isinstance(appended, wc.DataAppended)
    assert appended == wc.DataAppended(writer, 2, MIN, appended.request_id, 22)
    assert await client.setup(SEG, writer) == 2
    # Another writer on the same segment is new.
    assert await client.setup(SEG, wid()) == MIN


async def test_setup_append_on_a_sealed_segment_is_append_setup(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    await client.append(writer, event(b"x"), 5)
    await client.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    assert await client.setup(SEG, writer) == 5


async def test_setup_append_on_a_missing_segment_is_no_such_segment(client: Client) -> None:
    request_id = rid()
    reply = await client.call(wc.SetupAppend(request_id, wid(), SEG, ""))
    assert reply == wc.NoSuchSegment(request_id, SEG, "", -1)


async def test_append_before_setup_on_this_connection_closes(connect: Connect) -> None:
    first, second = await connect(), await connect()
    await first.create(SEG)
    writer = wid()
    await first.setup(SEG, writer)
    # Set up on the first connection only: the second may not append for it.
    await second.send(wc.AppendBlockEnd(writer, 9, event(b"x"), 1, 1, rid()))
    assert await second.closed_by_server()
    assert (await first.info(SEG)).write_offset == 0


async def test_num_event_zero_or_negative_closes(connect: Connect) -> None:
    for num_event in (0, -1):
        c = await connect()
        name = f"{SEG}{num_event}"
        await c.create(name)
        writer = wid()
        await c.setup(name, writer)
        await c.send(wc.AppendBlockEnd(writer, 9, event(b"x"), num_event, 1, rid()))
        assert await c.closed_by_server()
        check = await connect()
        assert (await check.info(name)).write_offset == 0


async def test_a_decreasing_event_number_closes(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    assert isinstance(await c.append(writer, event(b"a"), 5), wc.DataAppended)
    await c.send(wc.AppendBlockEnd(writer, 9, event(b"b"), 1, 4, rid()))
    assert await c.closed_by_server()


async def test_reconnect_resumes_from_the_persisted_number_and_skips_duplicates(connect: Connect) -> None:
    first = await connect()
    await first.create(SEG)
    writer = wid()
    await first.setup(SEG, writer)
    await first.append(writer, event(b"a") + event(b"b"), 2, num_event=2)
    await first.close()
    second = await connect()
    assert await second.setup(SEG, writer) == 2
    # The same block again (a client that missed the ack resends it): acknowledged, not stored.
    again = await second.append(writer, event(b"a") + event(b"b"), 2, num_event=2)
    assert isinstance(again, wc.DataAppended) and again.event_number == 2
    assert isinstance(await second.append(writer, event(b"c"), 3), wc.DataAppended)
    assert await segment_bytes(second, SEG) == event(b"a") + event(b"b") + event(b"c")


async def test_appends_survive_a_server_restart(start_server: ServerFactory, database: PgDatabase) -> None:
    server = await start_server()
    c = await Client.connect(server.address)
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    assert isinstance(await c.append(writer, event(b"durable"), 7), wc.DataAppended)
    await c.close()
    await server.close()
    # A new server over a new storage object on the same database.
    again = await SegmentStoreServer.start(PgSegmentStorage(database, SystemClock()), "127.0.0.1", 0)
    try:
        c2 = await Client.connect(again.address)
        try:
            assert await c2.setup(SEG, writer) == 7
            assert await segment_bytes(c2, SEG) == event(b"durable")
        finally:
            await c2.close()
    finally:
        await again.close()


async def test_java_append_block_with_a_partial_event(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    whole = event(b"first") + event(b"second")
    third = event(b"third-event")
    partial = wc.PartialEvent(third[:5])
    await client.send(wc.AppendBlock(writer, whole + encode(partial)))
    reply = await client.call(wc.AppendBlockEnd(writer, len(whole), third[5:], 3, 3, rid()))
    assert isinstance(reply, wc.DataAppended) and reply.event_number == 3
    assert await segment_bytes(client, SEG) == whole + third


async def test_java_append_block_with_padding(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    whole = event(b"only")
    await client.send(wc.AppendBlock(writer, whole + encode(wc.Padding(4))))
    reply = await client.call(wc.AppendBlockEnd(writer, len(whole), b"", 1, 1, rid()))
    assert isinstance(reply, wc.DataAppended)
    assert await segment_bytes(client, SEG) == whole


async def test_padding_with_block_end_data_closes(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    whole = event(b"only")
    await c.send(wc.AppendBlock(writer, whole + encode(wc.Padding(4))))
    await c.send(wc.AppendBlockEnd(writer, len(whole), b"junk", 1, 1, rid()))
    assert await c.closed_by_server()
    assert (await (await connect()).info(SEG)).write_offset == 0


async def test_another_frame_inside_an_append_block_closes(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    await c.send(wc.AppendBlock(writer, event(b"x") + encode(wc.Padding(0))))
    await c.send(wc.GetStreamSegmentInfo(rid(), SEG, ""))
    assert await c.closed_by_server()


async def test_conditional_block_end(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    ok = await client.call(wc.ConditionalBlockEnd(writer, 0, 0, b"raw-bytes", rid()))
    assert isinstance(ok, wc.DataAppended) and ok.current_segment_write_offset == 9
    request_id = rid()
    failed = await client.call(wc.ConditionalBlockEnd(writer, 1, 5, b"more", request_id))
    assert failed == wc.ConditionalCheckFailed(writer, 1, request_id)
    # The connection stays open and the same event number succeeds at the right offset.
    again = await client.call(wc.ConditionalBlockEnd(writer, 1, 9, b"more", rid()))
    assert isinstance(again, wc.DataAppended) and again.event_number == 1
    assert await segment_bytes(client, SEG) == b"raw-bytesmore"


async def test_conditional_append_stores_the_event_header(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    reply = await client.call(wc.ConditionalAppend(writer, 1, 0, wc.Event(b"state"), rid()))
    assert isinstance(reply, wc.DataAppended)
    failed = await client.call(wc.ConditionalAppend(writer, 2, 0, wc.Event(b"late"), rid()))
    assert isinstance(failed, wc.ConditionalCheckFailed) and failed.event_number == 2
    assert await segment_bytes(client, SEG) == event(b"state")


async def test_append_to_a_sealed_segment_is_segment_is_sealed(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    await client.append(writer, event(b"a"), 1)
    other = await Client.connect(client.writer.get_extra_info("peername"))
    await other.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    await other.close()
    request_id = rid()
    reply = await client.call(wc.AppendBlockEnd(writer, 9, event(b"b"), 1, 2, request_id))
    assert reply == wc.SegmentIsSealed(request_id, SEG, "", 2)
    assert (await client.info(SEG)).write_offset == 9
    # The writer's state is dropped: it must set up again before appending.
    assert await client.setup(SEG, writer) == 1


async def test_a_sealed_writer_must_set_up_again(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    await c.setup(SEG, writer)
    await c.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    assert isinstance(await c.append(writer, event(b"a"), 1), wc.SegmentIsSealed)
    await c.send(wc.AppendBlockEnd(writer, 9, event(b"b"), 1, 2, rid()))
    assert await c.closed_by_server()


async def test_append_to_a_deleted_segment_is_no_such_segment(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    await client.expect(wc.DeleteSegment(rid(), SEG, ""), wc.SegmentDeleted)
    request_id = rid()
    reply = await client.call(wc.AppendBlockEnd(writer, 9, event(b"a"), 1, 1, request_id))
    assert isinstance(reply, wc.NoSuchSegment) and reply.request_id == request_id and reply.segment == SEG


async def test_two_writers_interleave_whole_blocks_only(connect: Connect) -> None:
    setup = await connect()
    await setup.create(SEG)
    blocks = 20

    async def write(tag: bytes) -> None:
        c = await connect()
        writer = wid()
        await c.setup(SEG, writer)
        for n in range(1, blocks + 1):
            data = event(tag * 100) + event(tag * 50)
            reply = await c.append(writer, data, 2 * n, num_event=2)
            assert isinstance(reply, wc.DataAppended), reply

    await asyncio.gather(write(b"a"), write(b"b"))
    data = await segment_bytes(setup, SEG)
    block = 8 + 100 + 8 + 50
    assert len(data) == 2 * blocks * block
    seen = [data[i : i + block] for i in range(0, len(data), block)]
    assert sorted(set(seen)) == [event(b"a" * 100) + event(b"a" * 50), event(b"b" * 100) + event(b"b" * 50)]


async def test_large_event_through_a_transient_segment(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    created = await c.expect(wc.CreateTransientSegment(rid(), writer, SEG, ""), wc.SegmentCreated)
    transient = created.segment
    prefix = f"{SEG}#transient.{writer:032x}."
    assert transient.startswith(prefix) and len(transient) == len(prefix) + 32
    assert await c.setup(transient, writer) == MIN
    big = event(bytes(range(256)) * (10 * 4096))  # over 8 MiB framed
    chunk = 8 * 1024 * 1024
    for i, start in enumerate(range(0, len(big), chunk)):
        reply = await c.call(wc.ConditionalBlockEnd(writer, i, start, big[start : start + chunk], rid()))
        assert isinstance(reply, wc.DataAppended), reply
    merged = await c.expect(wc.MergeSegments(rid(), SEG, transient, ""), wc.SegmentsMerged)
    assert merged.new_target_write_offset == len(big)
    await c.close()
    check = await connect()
    assert (await check.info(SEG)).write_offset == len(big)
    first = await check.read(SEG, 0, 16)
    assert isinstance(first, wc.SegmentRead) and first.data == big[:16]


async def test_an_unmerged_transient_segment_goes_with_its_connection(connect: Connect) -> None:
    c = await connect()
    await c.create(SEG)
    writer = wid()
    transient = (await c.expect(wc.CreateTransientSegment(rid(), writer, SEG, ""), wc.SegmentCreated)).segment
    await c.setup(transient, writer)
    await c.call(wc.ConditionalBlockEnd(writer, 0, 0, b"chunk", rid()))
    other = await connect()
    assert (await other.info(transient)).write_offset == 5
    await c.close()
    for _ in range(100):
        if isinstance(await other.call(wc.GetStreamSegmentInfo(rid(), transient, "")), wc.NoSuchSegment):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the transient segment outlived its connection")
    assert (await other.info(SEG)).write_offset == 0


async def test_a_transient_segment_needs_its_parent(client: Client) -> None:
    reply = await client.call(wc.CreateTransientSegment(rid(), wid(), SEG, ""))
    assert isinstance(reply, wc.NoSuchSegment)
