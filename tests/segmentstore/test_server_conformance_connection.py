"""The wire server's connection rules over real TCP: the Hello handshake, KeepAlive, request-id
echo, malformed and oversize frames closing only their own connection, frames near the size
limit, and no unsolicited frames."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

import pytest

from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import (
    Client,
    event,
    rid,
    wid,
)

Connect = Callable[..., Awaitable[Client]]
SEG = "sc/st/0.#epoch.0"


async def test_hello_is_answered_with_15_5(connect: Connect) -> None:
    c = await connect(hello=False)
    assert await c.call(wc.Hello(15, 5)) == wc.Hello(15, 5)
    # A Java client's Hello(17, 5) is compatible too.
    assert await c.call(wc.Hello(17, 5)) == wc.Hello(15, 5)
    await c.create(SEG)


async def test_requests_need_no_hello_first(connect: Connect) -> None:
    c = await connect(hello=False)
    await c.create(SEG)


async def test_a_hello_too_new_closes_the_connection(connect: Connect) -> None:
    c = await connect(hello=False)
    assert await c.call(wc.Hello(20, 16)) == wc.Hello(15, 5)
    assert await c.closed_by_server()


async def test_a_hello_too_old_closes_the_connection(connect: Connect) -> None:
    c = await connect(hello=False)
    await c.send(wc.Hello(4, 1))
    assert await c.closed_by_server()


async def test_keepalive_is_echoed(client: Client) -> None:
    assert await client.call(wc.KeepAlive()) == wc.KeepAlive()
    await client.nothing_within(0.2)


async def test_every_reply_echoes_its_request_id(client: Client) -> None:
    await client.create(SEG)
    writer = wid()
    replies: list[tuple[int, wc.Command]] = []
    for make in (
        lambda r: wc.CreateSegment(r, SEG, 0, 0, ""),  # SegmentAlreadyExists
        lambda r: wc.GetStreamSegmentInfo(r, SEG, ""),
        lambda r: wc.GetStreamSegmentInfo(r, "sc/st/9.#epoch.0", ""),  # NoSuchSegment
        lambda r: wc.SetupAppend(r, writer, SEG, ""),
        lambda r: wc.AppendBlockEnd(writer, 8 + 3, event(b"abc"), 1, 1, r),
        lambda r: wc.ReadSegment(SEG, 0, 100, "", r),
        lambda r: wc.TruncateSegment(r, SEG, 1000, ""),  # SegmentIsTruncated
        lambda r: wc.GetSegmentAttribute(r, SEG, 7, ""),
        lambda r: wc.UpdateSegmentAttribute(r, SEG, 7, 1, wc.NULL_ATTRIBUTE_VALUE, ""),
        lambda r: wc.ReadTable(r, SEG, "", (wc.TableKey(b"k", wc.TABLE_KEY_NO_VERSION),)),  # wrong kind
        lambda r: wc.LocateOffset(r, SEG, 0, ""),  # OperationUnsupported
        lambda r: wc.SealSegment(r, SEG, ""),
        lambda r: wc.SealSegment(r, SEG, ""),  # SegmentIsSealed
        lambda r: wc.ReadSegment(SEG, 11, 100, "", r),  # eos
        lambda r: wc.ReadSegment(SEG, 12, 100, "", r),  # ErrorMessage
    ):
        request_id = rid()
        replies.append((request_id, await client.call(make(request_id))))
    kinds = [type(reply).__name__ for _, reply in replies]
    assert kinds == [
        "SegmentAlreadyExists",
        "StreamSegmentInfo",
        "NoSuchSegment",
        "AppendSetup",
        "DataAppended",
        "SegmentRead",
        "SegmentIsTruncated",
        "SegmentAttribute",
        "SegmentAttributeUpdated",
        "ErrorMessage",
        "OperationUnsupported",
        "SegmentSealed",
        "SegmentIsSealed",
        "SegmentRead",
        "ErrorMessage",
    ]
    for request_id, reply in replies:
        assert reply.request_id == request_id, reply
        trace = getattr(reply, "server_stack_trace", "")
        assert trace == "", reply


async def test_an_unknown_type_closes_only_that_connection(
    connect: Connect, server: SegmentStoreServer
) -> None:
    bad, good = await connect(), await connect()
    await bad.send_raw(struct.pack(">ii", 55_555, 0))
    assert await bad.closed_by_server()
    await good.create(SEG)
    # The listener still accepts.
    again = await connect()
    assert (await again.info(SEG)).exists


async def test_a_truncated_payload_closes_the_connection(connect: Connect) -> None:
    bad, good = await connect(), await connect()
    # A CreateSegment whose payload stops inside the segment name.
    await bad.send_raw(struct.pack(">iiqH", wc.CreateSegment.TYPE, 8 + 2 + 1, 1, 40) + b"s")
    assert await bad.closed_by_server()
    await good.create(SEG)


async def test_an_oversize_or_negative_length_closes_the_connection(connect: Connect) -> None:
    for length in (wc.MAX_WIRECOMMAND_SIZE + 1, -1):
        c = await connect()
        await c.send_raw(struct.pack(">ii", wc.GetStreamSegmentInfo.TYPE, length))
        assert await c.closed_by_server()


async def test_an_unexpected_failure_closes_only_that_connection(
    connect: Connect, storage: PgSegmentStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage failure that is no refusal (here injected into one call) is logged and ends the
    connection that met it; the server keeps serving."""
    victim, bystander = await connect(), await connect()
    await bystander.create_table("sc/t_kvtable/0.#epoch.0")

    async def broken(name: str) -> object:
        raise RuntimeError("injected")

    monkeypatch.setattr(storage, "table_info", broken)
    await victim.send(wc.GetTableSegmentInfo(rid(), "sc/t_kvtable/0.#epoch.0", ""))
    assert await victim.closed_by_server()
    await bystander.create(SEG)
    late = await connect()
    assert (await late.info(SEG)).exists


async def test_a_reply_type_sent_as_a_request_closes_the_connection(connect: Connect) -> None:
    c = await connect()
    await c.send(wc.SegmentCreated(rid(), SEG))
    assert await c.closed_by_server()


async def test_frames_near_the_size_limit(client: Client) -> None:
    """An 8 MiB + 8 append (the Rust writer's largest batch) and a 2 MiB read reply."""
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    data = event(bytes(range(256)) * (8 * 4096))
    assert len(data) == 8 * 1024 * 1024 + 8
    appended = await client.append(writer, data, 1)
    assert isinstance(appended, wc.DataAppended), appended
    assert appended.current_segment_write_offset == len(data)
    read = await client.read(SEG, 0, 8 * 1024 * 1024)
    assert isinstance(read, wc.SegmentRead)
    assert read.data == data[: 2 * 1024 * 1024]
    assert not read.at_tail and not read.end_of_segment
