"""An embedded segment store on a free loopback port and the controller's client of it, for tests
and benches that build services by hand: the same TCP exchange `serve` uses, no bypass."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from app.clock import SystemClock
from app.domain.hosts import HostAddress
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.settings import DECLARATIONS, Settings, add_setting, resolve
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.wiring.tier import open_tier


class OneHost:
    """Every segment on one store (the embedded store's container map)."""

    def __init__(self, address: HostAddress) -> None:
        self._address = address

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        return self._address


def tier_from_environment() -> dict[str, Any]:
    """The long-term tier's settings as the environment gives them (PGCONTROLLER_TIER, ...), read
    as `serve` reads them: `make test-tier` sets them, and the stores a test composes in process
    then run on the tier too, as the `serve` processes it starts do."""
    parser = argparse.ArgumentParser()
    for item in DECLARATIONS:
        if item.name.startswith("tier"):
            add_setting(parser, item.name)
    return dict(resolve(parser.parse_args([]), os.environ).values)


@asynccontextmanager
async def embedded_segment_store(
    pool: Database, *, tail_wait_s: float = 2.0
) -> AsyncIterator[WireSegmentStore]:
    clock = SystemClock()
    tier = await open_tier(Settings(**tier_from_environment()), pool, clock)
    storage = PgSegmentStorage(pool, clock, chunks=tier.chunks if tier is not None else None)
    moving: list[asyncio.Task[None]] = []
    if tier is not None:
        storage.throttle = tier.throttle
        moving = [asyncio.create_task(tier.writer.run()), asyncio.create_task(tier.collector.run())]
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=tail_wait_s)
    client = WireSegmentStore(OneHost(HostAddress(*server.address)))
    try:
        yield client
    finally:
        await client.close()
        await server.close()
        for task in moving:
            task.cancel()
        await asyncio.gather(*moving, return_exceptions=True)
        if tier is not None:
            await tier.chunks.close()
