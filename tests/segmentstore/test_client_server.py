"""WireSegmentStore against the real embedded server over PostgreSQL storage, on loopback: what
only a real server shows (the bytes an append stores, a restarted server under a pooled client).
The port's whole contract runs in tests/store/test_segment_store_contract.py ("wire")."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from app.clock import SystemClock
from app.domain.errors import IllegalState, NotFound
from app.domain.hosts import HostAddress
from app.domain.records import ScaleType
from app.ports import SegmentInfo
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.connections import next_request_id
from app.segmentstore.client.replies import expect
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.store.db import Database
from app.store.pool import create_pool
from app.store.segment_data import PgSegmentStorage

SEG = "sc/st/0.#epoch.0"


class MovableHost:
    """Every segment on one store, whose address the test may change."""

    def __init__(self, address: HostAddress) -> None:
        self.address = address

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        return self.address


@dataclass
class Real:
    pool: Database
    server: SegmentStoreServer
    locator: MovableHost
    client: WireSegmentStore

    async def start_server(self, port: int) -> None:
        storage = PgSegmentStorage(self.pool, SystemClock())
        self.server = await SegmentStoreServer.start(storage, "127.0.0.1", port, tail_wait_s=0.5)
        self.locator.address = HostAddress(*self.server.address)


@pytest.fixture
async def real(db_url: str) -> AsyncIterator[Real]:
    pool = await create_pool(db_url, min_size=1, max_size=4)
    server = await SegmentStoreServer.start(PgSegmentStorage(pool, SystemClock()), "127.0.0.1", 0)
    locator = MovableHost(HostAddress(*server.address))
    built = Real(pool, server, locator, WireSegmentStore(locator, request_timeout_s=10.0))
    try:
        yield built
    finally:
        await built.client.close()
        await built.server.close()
        await pool.close()


async def read_all(real: Real, name: str) -> bytes:
    read = wc.ReadSegment(name, 0, 1 << 20, "", next_request_id())
    reply = expect(read, await real.client.pool.request(real.locator.address, read), wc.SegmentRead)
    return reply.data


async def test_append_stores_framed_events(real: Real) -> None:
    await real.client.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    assert await real.client.append(SEG, 20) == 20
    assert await real.client.append(SEG, 8) == 28
    assert await read_all(real, SEG) == struct.pack(">ii", 0, 12) + bytes(12) + struct.pack(">ii", 0, 0)
    assert await real.client.get_segment_info(SEG) == SegmentInfo(SEG, 28, 0, False)


async def test_append_to_a_sealed_or_missing_segment(real: Real) -> None:
    with pytest.raises(NotFound):
        await real.client.append(SEG, 8)
    await real.client.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    await real.client.append(SEG, 10)
    assert await real.client.seal_segment(SEG) == 10
    with pytest.raises(IllegalState):
        await real.client.append(SEG, 10)


async def test_a_restarted_server_costs_the_pooled_client_no_failure(real: Real) -> None:
    await real.client.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    address = HostAddress(*real.server.address)
    assert real.client.pool.idle_count(address) == 1
    await real.server.close()  # the pooled connection dies with it
    await real.start_server(address.port)
    assert HostAddress(*real.server.address) == address
    # The dead pooled connection costs one retry on a new connection, not a failed call.
    assert await real.client.get_segment_info(SEG) == SegmentInfo(SEG, 0, 0, False)
    assert real.client.pool.idle_count(address) == 1
