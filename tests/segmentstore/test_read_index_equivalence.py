"""Reads answered from the read index are the database's answers: a store with the index, fed by
appends through it (several connections at once) and changed by seals, truncations, a
transaction's merge and a sibling store's appends, answers every read exactly as a store over
the same PostgreSQL without an index does, for many random (offset, size) pairs after every
step; and a good share of them really came from memory."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.domain.segment_names import transaction_segment_name
from app.metrics.registry import REGISTRY
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.peers import StorePeers
from app.segmentstore.server.read_index import ReadIndex
from app.segmentstore.wire import commands as wc
from app.store.segment_data import PgSegmentStorage
from tests.segmentstore.server_harness import Client, event, rid, wid

SEG = "sc/eq/0.#epoch.0"
READS_PER_STEP = 150


@pytest.fixture
def directory() -> Iterator[Path]:
    # A short path: a Unix socket's name has at most 107 bytes.
    path = Path("/tmp") / f"index-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o700)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


class Stores:
    """The store under test (with its index, store 0 of a group of two), its sibling (store 1),
    and the oracle: a store without an index, so every answer of its is PostgreSQL's."""

    def __init__(self, indexed: SegmentStoreServer, sibling: SegmentStoreServer, oracle: SegmentStoreServer):
        self.indexed = indexed
        self.sibling = sibling
        self.oracle = oracle


@pytest.fixture
async def stores(storage: PgSegmentStorage, directory: Path) -> AsyncIterator[Stores]:
    peers = [StorePeers(directory, i, 2) for i in range(2)]
    for p in peers:
        p.start()
    # tail_wait_s=0: a read at the tail answers at once, so any offset can be compared.
    indexed = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=0, peers=peers[0])
    sibling = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=0, peers=peers[1])
    oracle = await SegmentStoreServer.start(
        storage, "127.0.0.1", 0, tail_wait_s=0, read_index=ReadIndex(0, 0)
    )
    try:
        yield Stores(indexed, sibling, oracle)
    finally:
        for server in (indexed, sibling, oracle):
            await server.close()
        for p in peers:
            p.close()


def _cached_reads(server: SegmentStoreServer) -> float:
    labels = {"store": f"{server.address[0]}:{server.address[1]}"}
    return REGISTRY.get_sample_value("pgcontroller_segmentstore_cached_reads_total", labels) or 0.0


class Checker:
    def __init__(self, indexed: Client, oracle: Client, rng: random.Random) -> None:
        self.indexed = indexed
        self.oracle = oracle
        self.rng = rng
        self.compared = 0

    async def same_answers(self, segment: str, length: int) -> None:
        """Random reads, most near the tail (where the index is), some anywhere and past the end."""
        for _ in range(READS_PER_STEP):
            roll = self.rng.random()
            if roll < 0.6:
                offset = max(0, length - self.rng.randint(1, 6000))
            elif roll < 0.9:
                offset = self.rng.randint(0, max(0, length + 20))
            else:
                offset = length + self.rng.randint(0, 3)
            size = self.rng.choice([1, 8, 100, 4096, 10_000, 1 << 20, 8 << 20])
            request_id = rid()
            cmd = wc.ReadSegment(segment, offset, size, "", request_id)
            from_index, from_db = await self.indexed.call(cmd), await self.oracle.call(cmd)
            assert from_index == from_db, (offset, size)
            self.compared += 1


async def _append_many(c: Client, writer: int, first_event: int, sizes: list[int], rng: random.Random) -> int:
    for number, size in enumerate(sizes, start=first_event):
        reply = await c.append(writer, event(rng.randbytes(size)), number)
        assert isinstance(reply, wc.DataAppended), reply
    return first_event + len(sizes)


async def _length(c: Client, segment: str) -> int:
    return (await c.info(segment)).write_offset


async def _heard(server: SegmentStoreServer, segment: str) -> None:
    """Waits until `server` has heard its sibling's change of `segment` (its entry is gone)."""
    deadline = time.monotonic() + 10
    while server.read_index_span(segment) is not None:
        assert time.monotonic() < deadline, "the sibling's change was never heard"
        await asyncio.sleep(0.01)


async def test_reads_from_the_index_equal_the_databases_answers_through_every_change(
    stores: Stores,
) -> None:
    rng = random.Random(3301)
    admin = await Client.connect(stores.indexed.address)
    writers = [await Client.connect(stores.indexed.address) for _ in range(3)]
    sibling = await Client.connect(stores.sibling.address)
    checker = Checker(
        await Client.connect(stores.indexed.address), await Client.connect(stores.oracle.address), rng
    )
    cached_before = _cached_reads(stores.indexed)
    try:
        await admin.create(SEG)
        ids = [wid() for _ in writers]
        for c, writer in zip(writers, ids, strict=True):
            await c.setup(SEG, writer)
        next_event = [1, 1, 1]

        # Appends through one connection, of sizes from one byte to more than a segment's budget.
        sizes = [rng.randint(1, 5000) for _ in range(30)] + [1 << 20, 3000, 2 << 20, 17]
        next_event[0] = await _append_many(writers[0], ids[0], next_event[0], sizes, rng)
        await checker.same_answers(SEG, await _length(admin, SEG))

        # Appends from three connections at once (their results return in any order).
        async def burst(i: int) -> None:
            next_event[i] = await _append_many(
                writers[i], ids[i], next_event[i], [rng.randint(1, 3000) for _ in range(25)], rng
            )

        await asyncio.gather(*(burst(i) for i in range(3)))
        await checker.same_answers(SEG, await _length(admin, SEG))

        # Truncated: reads below the new start are refused by both.
        length = await _length(admin, SEG)
        await admin.expect(wc.TruncateSegment(rid(), SEG, length - 2000, ""), wc.SegmentTruncated)
        await checker.same_answers(SEG, length)
        next_event[1] = await _append_many(writers[1], ids[1], next_event[1], [500, 700, 20], rng)
        await checker.same_answers(SEG, await _length(admin, SEG))

        # A transaction merged into it.
        txn = transaction_segment_name(SEG, rng.getrandbits(64), rng.getrandbits(64))
        await admin.create(txn)
        txn_writer = wid()
        await admin.setup(txn, txn_writer)
        await _append_many(admin, txn_writer, 1, [4000, 10, 900], rng)
        await admin.expect(wc.MergeSegmentsBatch(rid(), SEG, (txn,), ""), wc.SegmentsBatchMerged)
        await checker.same_answers(SEG, await _length(admin, SEG))
        next_event[2] = await _append_many(writers[2], ids[2], next_event[2], [300, 300], rng)
        await checker.same_answers(SEG, await _length(admin, SEG))

        # A sibling store appends: heard, the index lets go; then appends here start it afresh.
        assert stores.indexed.read_index_span(SEG) is not None
        sibling_writer = wid()
        await sibling.setup(SEG, sibling_writer)
        await _append_many(sibling, sibling_writer, 1, [2500, 40], rng)
        await _heard(stores.indexed, SEG)
        await checker.same_answers(SEG, await _length(admin, SEG))
        next_event[0] = await _append_many(writers[0], ids[0], next_event[0], [1200, 64, 9000], rng)
        await checker.same_answers(SEG, await _length(admin, SEG))

        # Sealed: end_of_segment, and reads past the end refused, by both.
        await admin.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
        await checker.same_answers(SEG, await _length(admin, SEG))

        assert checker.compared == 9 * READS_PER_STEP
        # Not a comparison of the database with itself: many answers came from memory.
        assert _cached_reads(stores.indexed) - cached_before > READS_PER_STEP
    finally:
        for c in [admin, *writers, sibling, checker.indexed, checker.oracle]:
            await c.close()
