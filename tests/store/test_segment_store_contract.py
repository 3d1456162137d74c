"""Contract of the SegmentStore port (app/ports/segment_store.py), run against every adapter.

The adapter is the wire client talking to the embedded wire server over PostgreSQL storage on
loopback (the in-process stand-in is gone); the "wire-tiered" one adds the long-term tier (files)
with a storage writer moving every byte out of PostgreSQL as soon as it can (16-byte chunks, no
age; each write of a test is moved before the test goes on) and its collector, so the calls meet
tiered data and moves in flight. An adapter joins by adding a builder to ADAPTERS: an
async context manager yielding the port implementation plus a `write` hook that appends bytes to
a segment the way a writer would (the port itself has no write call).

These tests also cover the embedded_segments table's concurrent writers (merge-once under
concurrent merges), which is why tests/store/test_versioned_races.py lists it as covered.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.chunks.filesystem import FileChunkStore
from app.domain.errors import IllegalState, InvalidInput, NotEmpty, NotFound
from app.domain.hosts import HostAddress
from app.domain.ids import transaction_segment_name
from app.domain.records import ScaleType
from app.ports import SegmentInfo, SegmentStore
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.connections import next_request_id
from app.segmentstore.client.replies import expect
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.store.chunk_collector import ChunkCollector
from app.store.segment_data import PgSegmentStorage
from app.store.storage_writer import StorageWriter
from app.store.tiering import PgTiering
from app.testing.controller import Services
from app.testing.segment_store import OneHost

SEG = "scope/stream/0.#epoch.0"
OTHER = "scope/stream/1.#epoch.0"
TABLE = "_system/_tables/kvt/0.#epoch.0"
TXN = (0x0123456789ABCDEF, 42)
NEGATIVE_TXN = (-1, -2)  # UUID halves as Java longs: the name uses 64-bit two's complement


@dataclass(frozen=True)
class Adapter:
    store: SegmentStore
    # Appends `size` bytes to a (stream, transaction or table) segment; returns its new length.
    write: Callable[[str, int], Awaitable[int]]


@asynccontextmanager
async def _wire(services: Services, storage: PgSegmentStorage | None = None) -> AsyncIterator[Adapter]:
    if storage is None:
        storage = PgSegmentStorage(services.resources.pool, services.resources.clock)
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0)
    address = HostAddress(*server.address)
    client = WireSegmentStore(OneHost(address), request_timeout_s=10.0)

    async def write(name: str, size: int) -> int:
        # Raw bytes, as a byte-stream writer appends them (the tests count bytes, some fewer than
        # an event's 8-byte header); a table segment grows by a table entry instead.
        if name == TABLE:
            return await _put_table_entry(client, address, name, size)
        writer_id = secrets.randbits(128)
        async with client.pool.dedicated(address) as connection:
            setup = wc.SetupAppend(next_request_id(), writer_id, name, "")
            expect(setup, await connection.request(setup, 10.0), wc.AppendSetup)
            block = wc.AppendBlockEnd(writer_id, size, bytes(size), 1, 1, next_request_id())
            done = expect(block, await connection.request(block, 10.0), wc.DataAppended)
        return done.current_segment_write_offset

    try:
        yield Adapter(client, write)
    finally:
        await client.close()
        await server.close()


@asynccontextmanager
async def _wire_tiered(services: Services) -> AsyncIterator[Adapter]:
    pool, clock = services.resources.pool, services.resources.clock
    with tempfile.TemporaryDirectory(prefix="contract-chunks-") as directory:
        chunks = FileChunkStore(Path(directory))
        chunks.prepare()
        tiering = PgTiering(pool, clock)
        writer = StorageWriter(tiering, chunks, chunk_bytes=16, interval_s=0.005, max_age_s=0)
        moving = [
            asyncio.create_task(writer.run()),
            asyncio.create_task(ChunkCollector(tiering, chunks, grace_ms=0, interval_s=0.01).run()),
        ]
        try:
            async with _wire(services, PgSegmentStorage(pool, clock, chunks=chunks)) as wire:

                async def write_then_move(name: str, size: int) -> int:
                    # What the test reads, truncates or merges next is in the tier already.
                    length = await wire.write(name, size)
                    await writer.flush()
                    return length

                yield Adapter(wire.store, write_then_move)
        finally:
            for task in moving:
                task.cancel()
            await asyncio.gather(*moving, return_exceptions=True)
            await chunks.close()


async def _put_table_entry(client: WireSegmentStore, address: HostAddress, name: str, size: int) -> int:
    # The tests make the table with key length 16, and such a table takes only 16-byte keys.
    entry = (wc.TableKey(b"key-of-16-bytes!", wc.TABLE_KEY_NO_VERSION), wc.TableValue(bytes(size)))
    update = wc.UpdateTableEntries(next_request_id(), name, "", (entry,))
    expect(update, await client.pool.request(address, update), wc.TableEntriesUpdated)
    return (await client.get_segment_info(name)).length


ADAPTERS: dict[str, Callable[[Services], AbstractAsyncContextManager[Adapter]]] = {
    "wire": _wire,
    "wire-tiered": _wire_tiered,
}


@pytest.fixture(params=sorted(ADAPTERS))
async def adapter(request: pytest.FixtureRequest, services: Services) -> AsyncIterator[Adapter]:
    async with ADAPTERS[request.param](services) as built:
        yield built


async def create(a: Adapter, name: str = SEG) -> None:
    await a.store.create_segment(name, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)


async def info_or_none(a: Adapter, name: str) -> SegmentInfo | None:
    try:
        return await a.store.get_segment_info(name)
    except NotFound:
        return None


def txn_name(parent: str, txn: tuple[int, int]) -> str:
    return transaction_segment_name(parent, *txn)


# --- stream segments ---------------------------------------------------------------------------


async def test_new_segment_is_empty_and_open(adapter: Adapter) -> None:
    await create(adapter)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 0, 0, False)


async def test_create_is_idempotent_and_keeps_the_data(adapter: Adapter) -> None:
    await create(adapter)
    assert await adapter.write(SEG, 10) == 10
    await create(adapter)
    await adapter.store.create_segment(SEG, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 1024)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 10, 0, False)


async def test_writes_grow_the_length(adapter: Adapter) -> None:
    await create(adapter)
    await create(adapter, OTHER)
    assert await adapter.write(SEG, 10) == 10
    assert await adapter.write(SEG, 5) == 15
    assert (await adapter.store.get_segment_info(SEG)).length == 15
    assert (await adapter.store.get_segment_info(OTHER)).length == 0


async def test_seal_returns_the_final_length_and_is_idempotent(adapter: Adapter) -> None:
    await create(adapter)
    await adapter.write(SEG, 123)
    assert await adapter.store.seal_segment(SEG) == 123
    assert await adapter.store.seal_segment(SEG) == 123
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 123, 0, True)


async def test_write_after_seal_fails(adapter: Adapter) -> None:
    await create(adapter)
    await adapter.write(SEG, 7)
    await adapter.store.seal_segment(SEG)
    with pytest.raises(IllegalState):
        await adapter.write(SEG, 1)
    assert (await adapter.store.get_segment_info(SEG)).length == 7


async def test_missing_segment_is_not_found(adapter: Adapter) -> None:
    with pytest.raises(NotFound):
        await adapter.store.seal_segment(SEG)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(SEG)
    with pytest.raises(NotFound):
        await adapter.store.truncate_segment(SEG, 0)
    with pytest.raises(NotFound):
        await adapter.store.update_policy(SEG, ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 10)


async def test_update_policy_keeps_the_data(adapter: Adapter) -> None:
    await create(adapter)
    await adapter.write(SEG, 9)
    await adapter.store.update_policy(SEG, ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 10)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 9, 0, False)


async def test_truncate(adapter: Adapter) -> None:
    await create(adapter)
    await adapter.write(SEG, 100)
    await adapter.store.truncate_segment(SEG, 40)
    assert (await adapter.store.get_segment_info(SEG)).start_offset == 40

    with pytest.raises(InvalidInput):
        await adapter.store.truncate_segment(SEG, 101)
    assert (await adapter.store.get_segment_info(SEG)).start_offset == 40

    # Never backwards.
    await adapter.store.truncate_segment(SEG, 10)
    assert (await adapter.store.get_segment_info(SEG)).start_offset == 40

    # Up to the length is allowed, also on a sealed segment.
    await adapter.store.seal_segment(SEG)
    await adapter.store.truncate_segment(SEG, 100)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 100, 100, True)


async def test_delete_is_idempotent(adapter: Adapter) -> None:
    await create(adapter)
    await create(adapter, OTHER)
    await adapter.write(SEG, 10)
    await adapter.store.delete_segment(SEG)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(SEG)
    await adapter.store.delete_segment(SEG)
    await adapter.store.delete_segment("never/created/0.#epoch.0")
    assert await adapter.store.get_segment_info(OTHER) == SegmentInfo(OTHER, 0, 0, False)

    # A re-created segment starts empty.
    await create(adapter)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 0, 0, False)


async def test_delete_takes_the_transaction_segments_along(adapter: Adapter) -> None:
    await create(adapter)
    await create(adapter, OTHER)
    for txn in (TXN, NEGATIVE_TXN):
        await adapter.store.create_transaction_segment(SEG, *txn, 0)
        await adapter.write(txn_name(SEG, txn), 5)
    await adapter.store.create_transaction_segment(OTHER, *TXN, 0)

    await adapter.store.delete_segment(SEG)

    for txn in (TXN, NEGATIVE_TXN):
        with pytest.raises(NotFound):
            await adapter.store.get_segment_info(txn_name(SEG, txn))
    # Another segment's transaction is untouched.
    assert (await adapter.store.get_segment_info(txn_name(OTHER, TXN))).length == 0


async def test_delete_matches_its_own_transactions_only(adapter: Adapter) -> None:
    # "_" and "%" in a name are literal characters, not patterns.
    underscore = "sc/s_t/0.#epoch.0"
    lookalike = "sc/sxt/0.#epoch.0"
    percent = "sc/s%/0.#epoch.0"
    lookalike2 = "sc/sabc/0.#epoch.0"
    for name in (underscore, lookalike, percent, lookalike2):
        await create(adapter, name)
        await adapter.store.create_transaction_segment(name, *TXN, 0)

    await adapter.store.delete_segment(underscore)
    await adapter.store.delete_segment(percent)

    for gone in (underscore, percent):
        with pytest.raises(NotFound):
            await adapter.store.get_segment_info(txn_name(gone, TXN))
    for kept in (lookalike, lookalike2):
        assert (await adapter.store.get_segment_info(kept)).name == kept
        assert (await adapter.store.get_segment_info(txn_name(kept, TXN))).name == txn_name(kept, TXN)


# --- transaction segments ----------------------------------------------------------------------


def test_transaction_segment_name_uses_twos_complement() -> None:
    assert transaction_segment_name(SEG, *NEGATIVE_TXN) == (
        SEG + "#transaction." + "ffffffffffffffff" + "fffffffffffffffe"
    )
    assert transaction_segment_name(SEG, *TXN) == (
        SEG + "#transaction." + "0123456789abcdef" + "000000000000002a"
    )
    assert transaction_segment_name(SEG, -(2**63), 0) == (
        SEG + "#transaction." + "8000000000000000" + "0000000000000000"
    )


async def test_transaction_segment_is_named_after_a_parent_that_need_not_exist(adapter: Adapter) -> None:
    # A transaction created on epoch 1 is named after seg(0, 1) even when segment 0 was
    # created in epoch 0 and no "0.#epoch.1" segment exists (as Pravega names txn segments).
    generalised = "scope/stream/0.#epoch.1"
    await adapter.store.create_transaction_segment(generalised, *TXN, 0)
    name = txn_name(generalised, TXN)
    assert await adapter.store.get_segment_info(name) == SegmentInfo(name, 0, 0, False)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(generalised)


async def test_transaction_segments_are_created_under_every_parent_at_once(adapter: Adapter) -> None:
    parents = ["scope/stream/0.#epoch.1", "scope/stream/1.#epoch.1", "scope/stream/2.#epoch.1"]
    await adapter.store.create_transaction_segments(parents, *TXN, 0)
    await adapter.write(txn_name(parents[0], TXN), 4)
    await adapter.store.create_transaction_segments(parents, *TXN, 0)  # idempotent: keeps its bytes
    assert [(await adapter.store.get_segment_info(txn_name(p, TXN))).length for p in parents] == [4, 0, 0]


async def test_merge_into_another_segment_than_the_namesake(adapter: Adapter) -> None:
    generalised = "scope/stream/0.#epoch.1"
    target = "scope/stream/0.#epoch.3"
    await create(adapter, target)
    await adapter.write(target, 7)
    await adapter.store.create_transaction_segment(generalised, *TXN, 0)
    await adapter.write(txn_name(generalised, TXN), 20)

    length = await adapter.store.merge_transaction_segment(target, *TXN, txn_parent=generalised)
    assert length == 27
    assert await adapter.store.merge_transaction_segment(target, *TXN, txn_parent=generalised) == 27
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(txn_name(generalised, TXN))


@pytest.mark.parametrize("txn", [TXN, NEGATIVE_TXN], ids=["positive", "negative"])
async def test_merge_adds_the_transaction_once(adapter: Adapter, txn: tuple[int, int]) -> None:
    await create(adapter)
    await adapter.write(SEG, 10)
    await adapter.store.create_transaction_segment(SEG, *txn, 0)
    await adapter.store.create_transaction_segment(SEG, *txn, 0)  # idempotent
    name = txn_name(SEG, txn)
    assert await adapter.store.get_segment_info(name) == SegmentInfo(name, 0, 0, False)
    assert await adapter.write(name, 30) == 30
    assert (await adapter.store.get_segment_info(SEG)).length == 10

    results = await asyncio.gather(
        adapter.store.merge_transaction_segment(SEG, *txn),
        adapter.store.merge_transaction_segment(SEG, *txn),
        return_exceptions=True,
    )
    assert results == [40, 40]
    assert (await adapter.store.get_segment_info(SEG)).length == 40
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(name)

    # Merging again returns the parent's current length.
    await adapter.write(SEG, 5)
    assert await adapter.store.merge_transaction_segment(SEG, *txn) == 45
    assert (await adapter.store.get_segment_info(SEG)).length == 45


async def test_merges_of_different_transactions_all_land(adapter: Adapter) -> None:
    await create(adapter)
    txns = [(1, i) for i in range(1, 6)]
    for high, low in txns:
        await adapter.store.create_transaction_segment(SEG, high, low, 0)
        await adapter.write(txn_name(SEG, (high, low)), low)
    results = await asyncio.gather(*(adapter.store.merge_transaction_segment(SEG, *t) for t in txns))
    assert max(results) == 15
    assert sorted(results) == sorted(set(results)), "each merge reports the length after its own bytes"
    assert (await adapter.store.get_segment_info(SEG)).length == 15


async def test_a_batch_merge_adds_each_transaction_once(adapter: Adapter) -> None:
    generalised = "scope/stream/0.#epoch.1"
    await create(adapter)
    await adapter.write(SEG, 1)
    txns = [(1, low) for low in range(1, 5)]
    for high, low in txns:
        await adapter.store.create_transaction_segment(generalised, high, low, 0)
        await adapter.write(txn_name(generalised, (high, low)), 10 * low)
    # One of them was merged on its own before (a resumed batch): it is not added again.
    assert await adapter.store.merge_transaction_segment(SEG, *txns[0], txn_parent=generalised) == 11
    assert await adapter.store.merge_transaction_segments(SEG, txns, txn_parent=generalised) == 101
    assert await adapter.store.merge_transaction_segments(SEG, txns, txn_parent=generalised) == 101
    for txn in txns:
        with pytest.raises(NotFound):
            await adapter.store.get_segment_info(txn_name(generalised, txn))


async def test_a_batch_merge_into_a_sealed_parent_fails_and_keeps_every_transaction(adapter: Adapter) -> None:
    name = await _sealed_parent_with_transaction(adapter)
    with pytest.raises(IllegalState):
        await adapter.store.merge_transaction_segments(SEG, [TXN])
    assert await info_or_none(adapter, name) == SegmentInfo(name, 30, 0, False)


async def _sealed_parent_with_transaction(a: Adapter) -> str:
    await create(a)
    await a.write(SEG, 10)
    await a.store.create_transaction_segment(SEG, *TXN, 0)
    name = txn_name(SEG, TXN)
    await a.write(name, 30)
    await a.store.seal_segment(SEG)
    return name


async def test_merge_into_a_sealed_parent_fails(adapter: Adapter) -> None:
    await _sealed_parent_with_transaction(adapter)
    with pytest.raises(IllegalState):
        await adapter.store.merge_transaction_segment(SEG, *TXN)
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 10, 0, True)


async def test_failed_merge_keeps_the_transaction_segment(adapter: Adapter) -> None:
    name = await _sealed_parent_with_transaction(adapter)
    with pytest.raises(IllegalState):
        await adapter.store.merge_transaction_segment(SEG, *TXN)
    # A failed merge changes nothing: the transaction's bytes must still be there.
    assert await info_or_none(adapter, name) == SegmentInfo(name, 30, 0, False), (
        "BUG: a merge refused because the parent is sealed still deleted the transaction segment "
        "and its 30 bytes (sql/queries/embedded_segments.sql, merge_transaction_segment: the "
        "DELETE in the CTE runs even when the UPDATE of the sealed parent matches no row)"
    )


@pytest.mark.parametrize("txn", [TXN, NEGATIVE_TXN], ids=["positive", "negative"])
async def test_abort_removes_the_transaction_and_is_idempotent(
    adapter: Adapter, txn: tuple[int, int]
) -> None:
    await create(adapter)
    await adapter.write(SEG, 10)
    await adapter.store.create_transaction_segment(SEG, *txn, 0)
    other_txn = (txn[0], txn[1] + 1)
    await adapter.store.create_transaction_segment(SEG, *other_txn, 0)
    name = txn_name(SEG, txn)
    await adapter.write(name, 30)

    await adapter.store.abort_transaction_segment(SEG, *txn)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(name)
    await adapter.store.abort_transaction_segment(SEG, *txn)

    # The parent and the sibling transaction are untouched; merging the aborted one adds nothing.
    assert (await adapter.store.get_segment_info(txn_name(SEG, other_txn))).length == 0
    assert await adapter.store.merge_transaction_segment(SEG, *txn) == 10
    assert await adapter.store.get_segment_info(SEG) == SegmentInfo(SEG, 10, 0, False)


# --- table segments ----------------------------------------------------------------------------


async def test_table_segment_create_and_delete(adapter: Adapter) -> None:
    await adapter.store.create_table_segment(TABLE, 16, 0)
    await adapter.store.create_table_segment(TABLE, 16, 0)  # idempotent
    assert await adapter.store.get_segment_info(TABLE) == SegmentInfo(TABLE, 0, 0, False)

    await adapter.store.delete_table_segment(TABLE, True)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(TABLE)
    await adapter.store.delete_table_segment(TABLE, True)  # idempotent
    await adapter.store.delete_table_segment(TABLE, False)


async def test_non_empty_table_segment_is_deleted_only_when_allowed(adapter: Adapter) -> None:
    await adapter.store.create_table_segment(TABLE, 16, 0)
    # A table's length is the store's own measure of its entries (not the value's bytes).
    length = await adapter.write(TABLE, 64)
    assert length > 0

    with pytest.raises(NotEmpty):
        await adapter.store.delete_table_segment(TABLE, True)
    assert (await adapter.store.get_segment_info(TABLE)).length == length

    await adapter.store.delete_table_segment(TABLE, False)
    with pytest.raises(NotFound):
        await adapter.store.get_segment_info(TABLE)


async def test_deleting_a_stream_segment_as_a_table_is_refused(adapter: Adapter) -> None:
    await create(adapter)
    with pytest.raises(InvalidInput):
        await adapter.store.delete_table_segment(SEG, must_be_empty=False)
    assert await info_or_none(adapter, SEG) is not None
    await adapter.store.delete_table_segment("scope/never-existed_kvtable/0.#epoch.0", must_be_empty=True)
