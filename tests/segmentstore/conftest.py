"""Fixtures of the wire-server tests: the embedded segment store on loopback over the real
PostgreSQL storage, and raw codec clients connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from app.clock import SystemClock
from app.segmentstore.server import SegmentStoreServer
from app.store.db import PgDatabase, open_pool
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import TAIL_WAIT_S, Client, ServerFactory


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[PgDatabase]:
    db = await open_pool(db_url, min_size=1, max_size=4)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def storage(database: PgDatabase) -> PgSegmentStorage:
    return PgSegmentStorage(database, SystemClock())


@pytest.fixture
async def start_server(storage: PgSegmentStorage) -> AsyncIterator[ServerFactory]:
    """Starts servers over the test's storage (tail_wait_s and tail_linger_s as given); closes
    them at the end."""
    started: list[SegmentStoreServer] = []

    async def start(*, tail_wait_s: float = TAIL_WAIT_S, tail_linger_s: float = 0.0) -> SegmentStoreServer:
        server = await SegmentStoreServer.start(
            storage, "127.0.0.1", 0, tail_wait_s=tail_wait_s, tail_linger_s=tail_linger_s
        )
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            await server.close()


@pytest.fixture
async def server(start_server: ServerFactory) -> SegmentStoreServer:
    return await start_server()


@pytest.fixture
async def client(server: SegmentStoreServer) -> AsyncIterator[Client]:
    c = await Client.connect(server.address)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def connect(server: SegmentStoreServer) -> AsyncIterator[Callable[..., Awaitable[Client]]]:
    """Opens more connections to the test's server; closes them at the end."""
    opened: list[Client] = []

    async def open_one(*, hello: bool = True) -> Client:
        c = await Client.connect(server.address, hello=hello)
        opened.append(c)
        return c

    try:
        yield open_one
    finally:
        for c in opened:
            await c.close()
