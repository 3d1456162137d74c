"""An embedded segment store on a free loopback port and the controller's client of it, for tests
and benches that build services by hand: the same TCP exchange `serve` uses, no bypass."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.clock import SystemClock
from app.domain.hosts import HostAddress
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage


class OneHost:
    """Every segment on one store (the embedded store's container map)."""

    def __init__(self, address: HostAddress) -> None:
        self._address = address

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        return self._address


@asynccontextmanager
async def embedded_segment_store(
    pool: Database, *, tail_wait_s: float = 2.0
) -> AsyncIterator[WireSegmentStore]:
    server = await SegmentStoreServer.start(
        PgSegmentStorage(pool, SystemClock()), "127.0.0.1", 0, tail_wait_s=tail_wait_s
    )
    client = WireSegmentStore(OneHost(HostAddress(*server.address)))
    try:
        yield client
    finally:
        await client.close()
        await server.close()
