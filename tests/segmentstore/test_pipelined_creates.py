"""A transaction's segments are created with CreateSegments pipelined on one connection, and the
store runs a connection's creates at once, answering each when it is done: the client's side
against a scripted store (what it sends, replies out of order, WrongHost, a failure), the
store's side against the real embedded server over PostgreSQL storage, on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.clock import SystemClock
from app.domain.errors import FinalFailure, NotFound
from app.domain.hosts import HostAddress
from app.domain.ids import transaction_segment_name
from app.domain.records import ScaleType
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode, read_command
from app.store.pool import create_pool
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.scripted import Answer, FixedLocator, scripted

PARENTS = [f"sc/st/{n}.#epoch.0" for n in range(4)]


def created(command: wc.Command) -> wc.Command:
    assert isinstance(command, wc.CreateSegment)
    return wc.SegmentCreated(command.request_id, command.segment)


def names(high: int = 5, low: int = 6) -> list[str]:
    return [transaction_segment_name(parent, high, low) for parent in PARENTS]


async def test_a_transactions_segments_go_pipelined_on_one_connection() -> None:
    async with scripted(created) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint), request_timeout_s=5.0)
        try:
            await store.create_transaction_segments(PARENTS, 5, 6, 0)
        finally:
            await store.close()
    assert [type(r.command) for r in server.received] == [wc.CreateSegment] * 4
    assert {r.connection for r in server.received} == {1}
    assert sorted(r.command.segment for r in server.received) == sorted(names())  # type: ignore[attr-defined]


async def test_replies_in_any_order_are_matched_by_request_id() -> None:
    held: list[wc.Command] = []

    def reversed_at_the_end(command: wc.Command) -> Answer:
        assert isinstance(command, wc.CreateSegment)
        if command.segment == transaction_segment_name(PARENTS[0], 5, 6):
            held.append(wc.OperationUnsupported(command.request_id, "createSegment", ""))
        else:
            held.append(created(command))
        return list(reversed(held)) if len(held) == len(PARENTS) else []

    async with scripted(reversed_at_the_end) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint), request_timeout_s=5.0)
        try:
            # The refusal came last, but it answers the first request: the error names its segment.
            with pytest.raises(FinalFailure) as refused:
                await store.create_transaction_segments(PARENTS, 5, 6, 0)
            assert names()[0] in str(refused.value)
            # The connection went back to the pool in a clean state: the next exchange works on it.
            held.clear()
            await store.create_transaction_segments(PARENTS, 5, 7, 0)
        finally:
            await store.close()
    assert server.connections == 1


async def test_a_disowned_segment_is_created_alone_after_asking_again() -> None:
    refused: list[str] = []

    def disown_the_second_once(command: wc.Command) -> Answer:
        assert isinstance(command, wc.CreateSegment)
        if command.segment == names()[1] and not refused:
            refused.append(command.segment)
            return wc.WrongHost(command.request_id, command.segment, "", "")
        return created(command)

    async with scripted(disown_the_second_once) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint), request_timeout_s=5.0)
        try:
            await store.create_transaction_segments(PARENTS, 5, 6, 0)
        finally:
            await store.close()
    asked = [r.command.segment for r in server.received]  # type: ignore[attr-defined]
    assert len(asked) == 5 and asked[-1] == names()[1]


async def test_one_refused_create_fails_the_call_and_the_others_still_land() -> None:
    def refuse_the_third(command: wc.Command) -> Answer:
        assert isinstance(command, wc.CreateSegment)
        if command.segment == names()[2]:
            return wc.OperationUnsupported(command.request_id, "createSegment", "")
        return created(command)

    async with scripted(refuse_the_third) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint), request_timeout_s=5.0)
        try:
            with pytest.raises(FinalFailure, match="OperationUnsupported"):
                await store.create_transaction_segments(PARENTS, 5, 6, 0)
        finally:
            await store.close()
    assert len(server.received) == 4


class GatedStorage(PgSegmentStorage):
    """Real storage whose creates each wait until `expected` of them are under way: a store that
    ran a connection's creates one at a time would never get there."""

    def __init__(self, *args: Any, expected: int) -> None:
        super().__init__(*args)
        self._expected = expected
        self._arrived = 0
        self._all_in = asyncio.Event()

    async def create_segment(self, *args: Any, **kwargs: Any) -> None:
        self._arrived += 1
        if self._arrived >= self._expected:
            self._all_in.set()
        await self._all_in.wait()
        await super().create_segment(*args, **kwargs)


@pytest.fixture
async def gated_server(db_url: str) -> AsyncIterator[SegmentStoreServer]:
    pool = await create_pool(db_url, min_size=1, max_size=4)
    storage = GatedStorage(pool, SystemClock(), expected=len(PARENTS))
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.close()
        await pool.close()


async def test_the_store_runs_a_connections_creates_at_once(gated_server: SegmentStoreServer) -> None:
    reader, writer = await asyncio.open_connection(*gated_server.address)
    try:
        writer.write(encode(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION)))
        assert isinstance(await read_command(reader), wc.Hello)
        requests = [wc.CreateSegment(100 + n, name, 0, 0, "", 0) for n, name in enumerate(names())]
        writer.write(b"".join(encode(r) for r in requests))
        async with asyncio.timeout(10):
            replies = [await read_command(reader) for _ in requests]
    finally:
        writer.close()
    assert sorted((r.request_id, r.segment) for r in replies) == [  # type: ignore[attr-defined]
        (r.request_id, r.segment) for r in requests
    ]
    assert all(isinstance(r, wc.SegmentCreated) for r in replies)


async def test_pipelined_creates_land_in_the_real_store(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=4)
    storage = PgSegmentStorage(pool, SystemClock())
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0)
    address = HostAddress(*server.address)
    store = WireSegmentStore(FixedLocator(address), request_timeout_s=10.0)
    try:
        for parent in PARENTS:
            await store.create_segment(parent, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
        await store.create_transaction_segments(PARENTS, 5, 6, 0)
        await store.create_transaction_segments(PARENTS, 5, 6, 0)  # idempotent
        for name in names():
            assert (await store.get_segment_info(name)).length == 0
        with pytest.raises(NotFound):
            await store.get_segment_info(transaction_segment_name(PARENTS[0], 5, 7))
        assert store.pool.idle_count(address) >= 1
    finally:
        await store.close()
        await server.close()
        await pool.close()
