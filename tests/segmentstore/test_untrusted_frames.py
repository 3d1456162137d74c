"""Large frames before a connection is trusted (issue 32 item 2), over real TCP: before Hello none
is read; with authentication on, after Hello, a large request is read only when the delegation
token at the start of its payload is valid (a table update may be a connection's first request),
and a large frame carrying no token (an AppendBlock) is not; with authentication off, Hello is
enough. A frame refused is never answered: the connection is closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.security.tokens import TokenSigner, TokenVerifier
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.limits import ConnectionLimits
from app.segmentstore.server.tokens import TokenGate
from app.segmentstore.wire import commands as wc
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import Client, rid, wid

KEY = b"the cluster's delegation-token signing key, shared by the controller and every store"
TABLE = "_system/_tables/untrusted"
UNTRUSTED_BYTES = 64 * 1024
LARGE_VALUE = bytes(4 * UNTRUSTED_BYTES)


@pytest.fixture
async def secured(storage: PgSegmentStorage) -> AsyncIterator[SegmentStoreServer]:
    server = await SegmentStoreServer.start(
        storage,
        "127.0.0.1",
        0,
        tokens=TokenGate(TokenVerifier(KEY)),
        limits=ConnectionLimits(untrusted_frame_bytes=UNTRUSTED_BYTES),
    )
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def open_store(storage: PgSegmentStorage) -> AsyncIterator[SegmentStoreServer]:
    server = await SegmentStoreServer.start(
        storage, "127.0.0.1", 0, limits=ConnectionLimits(untrusted_frame_bytes=UNTRUSTED_BYTES)
    )
    try:
        yield server
    finally:
        await server.close()


def large_update(token: str) -> wc.UpdateTableEntries:
    entry = (wc.TableKey(b"key", wc.TABLE_KEY_NO_VERSION), wc.TableValue(LARGE_VALUE))
    return wc.UpdateTableEntries(rid(), TABLE, token, (entry,))


async def create_table(server: SegmentStoreServer, token: str) -> None:
    c = await Client.connect(server.address)
    try:
        await c.expect(wc.CreateTableSegment(rid(), TABLE, token, False, 0, 0), wc.SegmentCreated)
    finally:
        await c.close()


async def test_a_large_first_request_with_a_valid_token_is_served(secured: SegmentStoreServer) -> None:
    master = TokenSigner(KEY).master()
    await create_table(secured, master)
    c = await Client.connect(secured.address)
    try:
        await c.expect(large_update(master), wc.TableEntriesUpdated)
        # Trusted from then on: a large frame with no token of its own is read too.
        await c.expect(large_update(master), wc.TableEntriesUpdated)
    finally:
        await c.close()


async def test_a_large_request_with_a_forged_token_is_not_read(secured: SegmentStoreServer) -> None:
    await create_table(secured, TokenSigner(KEY).master())
    forged = TokenSigner(b"another cluster's key, not this one's, of the same length as ours!!").master()
    c = await Client.connect(secured.address)
    await c.send(large_update(forged))
    assert await c.closed_by_server()


async def test_a_large_frame_without_a_token_is_not_read_before_one_was_valid(
    secured: SegmentStoreServer,
) -> None:
    c = await Client.connect(secured.address)
    await c.send(wc.AppendBlock(wid(), LARGE_VALUE))
    assert await c.closed_by_server()


async def test_before_hello_no_large_frame_is_read(open_store: SegmentStoreServer) -> None:
    c = await Client.connect(open_store.address, hello=False)
    await c.send(large_update(""))
    assert await c.closed_by_server()


async def test_with_authentication_off_hello_is_enough(open_store: SegmentStoreServer) -> None:
    await create_table(open_store, "")
    c = await Client.connect(open_store.address)
    try:
        await c.expect(large_update(""), wc.TableEntriesUpdated)
    finally:
        await c.close()
