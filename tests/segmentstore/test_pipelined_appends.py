"""A connection's appends in flight together (app/segmentstore/server/acks.py), against the real
store over PostgreSQL: sent without waiting for their acknowledgements, they are stored and
acknowledged in order, share group commits, a request after them is answered after them, and a
peer that leaves with appends in flight leaves no error behind."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import Client, event, rid, wid

SEG = "pipe/s/0.#epoch.0"
APPENDS = 200


def _appends(writer: int, count: int) -> bytes:
    return b"".join(
        encode(wc.AppendBlockEnd(writer, 0, event(n.to_bytes(4, "big") * 25), 1, n, rid()))
        for n in range(1, count + 1)
    )


async def test_appends_sent_together_are_stored_and_acknowledged_in_order(
    client: Client, storage: PgSegmentStorage
) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    groups_before = storage._appends.groups
    # Every append, then one other request, in one write: nothing waits for an acknowledgement.
    await client.send_raw(_appends(writer, APPENDS) + encode(wc.GetStreamSegmentInfo(rid(), SEG, "")))
    acks = [await client.recv() for _ in range(APPENDS)]
    info = await client.recv()
    assert all(isinstance(a, wc.DataAppended) for a in acks), acks[:3]
    assert [a.event_number for a in acks if isinstance(a, wc.DataAppended)] == list(range(1, APPENDS + 1))
    offsets = [a.current_segment_write_offset for a in acks if isinstance(a, wc.DataAppended)]
    assert offsets == sorted(offsets) and len(set(offsets)) == APPENDS
    # Answered after the appends before it: it sees all of them.
    assert isinstance(info, wc.StreamSegmentInfo) and info.write_offset == offsets[-1], info
    # Committed in groups, not one transaction each.
    assert storage._appends.groups - groups_before < APPENDS // 4, storage._appends.groups - groups_before
    data = await client.read(SEG, 0, 1 << 20)
    assert isinstance(data, wc.SegmentRead)
    assert data.data == b"".join(event(n.to_bytes(4, "big") * 25) for n in range(1, APPENDS + 1))


async def test_a_peer_that_leaves_with_appends_in_flight_leaves_no_error_and_whole_appends(
    server: SegmentStoreServer, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    leaving = await Client.connect(server.address)
    await leaving.setup(SEG, writer)
    with caplog.at_level(logging.DEBUG):
        leaving.writer.write(_appends(writer, APPENDS))
        # Gone once the first acknowledgements came: the others are in flight.
        for _ in range(3):
            assert isinstance(await leaving.recv(), wc.DataAppended)
        leaving.writer.transport.abort()
        # The store notices, its acknowledgements go nowhere; whatever it committed stays.
        await asyncio.sleep(1.0)
        gc.collect()
        await asyncio.sleep(0.1)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    # Whole appends only, in order: the writer's next setup learns the last one stored.
    last = await client.setup(SEG, writer)
    info = await client.info(SEG)
    assert 3 <= last <= APPENDS, last
    assert info.write_offset == last * len(event(b"\0" * 100)), (last, info.write_offset)
