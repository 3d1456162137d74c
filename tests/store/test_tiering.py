"""The long-term tier over a real PostgreSQL and a real chunk store (files): the storage writer
moves whole chunks and reads stay byte-exact across the tiers; truncation, deletion and merges
act on the index; every way a move can fail leaves the rows in PostgreSQL and the object to the
collector, which deletes it only after its grace."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from app.chunks.contract import ChunkStoreError
from app.chunks.filesystem import FileChunkStore
from app.domain.errors import StoreUnavailable
from app.segmentstore.storage import AppendRequest, NoSuchSegment, SegmentTruncated
from app.store.chunk_collector import ChunkCollector
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.store.storage_writer import StorageWriter, chunk_name
from app.store.tier_throttle import TierThrottle
from app.store.tiering import ChunkRows, PgTiering
from app.testing.clock import ManualClock

SEG = "scope/stream/0.#epoch.0"
TXN = SEG + "#transaction.00000000000000000000000000000001"
CHUNK = 2000
GRACE_MS = 60_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(5_000)


@pytest.fixture
def storage(db: Database, clock: ManualClock, chunks: FileChunkStore) -> PgSegmentStorage:
    return PgSegmentStorage(db, clock, chunks=chunks)


@pytest.fixture
def tiering(db: Database, clock: ManualClock) -> PgTiering:
    return PgTiering(db, clock)


@pytest.fixture
def writer(tiering: PgTiering, chunks: FileChunkStore) -> StorageWriter:
    return StorageWriter(tiering, chunks, chunk_bytes=CHUNK, interval_s=0.05)


@pytest.fixture
def collector(tiering: PgTiering, chunks: FileChunkStore) -> ChunkCollector:
    return ChunkCollector(tiering, chunks, grace_ms=GRACE_MS, interval_s=0.05)


async def fill(storage: PgSegmentStorage, name: str, blocks: int, *, seed: int = 1) -> bytes:
    """`blocks` appends of 100-700 random bytes by writer `seed`; every byte written, in order."""
    rng = random.Random(seed)
    written = b""
    for number in range(1, blocks + 1):
        data = rng.randbytes(rng.randint(100, 700))
        await storage.append(AppendRequest(name, seed, data, number, 1))
        written += data
    return written


async def rows_in_pg(db: Database, name: str) -> tuple[int, int]:
    row = await db.fetchrow(
        "SELECT count(*) AS n, COALESCE(sum(octet_length(data)), 0) AS b "
        "FROM segment_chunks WHERE segment = $1",
        name,
    )
    assert row is not None
    return int(row["n"]), int(row["b"])


async def objects(chunks: FileChunkStore) -> list[str]:
    return [name async for name in chunks.names("chunks/")]


async def assert_reads(storage: PgSegmentStorage, name: str, written: bytes, start: int = 0) -> None:
    rng = random.Random(3)
    spans = [(start, len(written) - start), (start, 1)]
    spans += [
        (o, rng.randint(1, 3 * CHUNK)) for o in (rng.randint(start, len(written) - 1) for _ in range(60))
    ]
    for offset, length in spans:
        result = await storage.read(name, offset, length)
        assert result.data == written[offset : offset + length], (offset, length)
        assert result.length == len(written)


async def test_whole_chunks_move_and_reads_stay_byte_exact_across_the_tiers(
    storage: PgSegmentStorage, writer: StorageWriter, chunks: FileChunkStore, db: Database
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 40)
    moved = await writer.flush()
    assert moved >= 4
    _rows, left = await rows_in_pg(db, SEG)
    # What is left in PostgreSQL is less than a chunk (an open segment's tail stays there).
    assert 0 < left < CHUNK
    tiered = await db.fetch(
        "SELECT start_offset, length, object FROM segment_tiered_chunks WHERE segment = $1 ORDER BY 1", SEG
    )
    assert len(tiered) == moved == len(await objects(chunks))
    assert all(int(r["length"]) >= CHUNK for r in tiered)
    assert sum(int(r["length"]) for r in tiered) + left == len(written)
    await assert_reads(storage, SEG, written)
    # Appends go on after a move, and a later pass moves on from where the last one stopped.
    written += await fill(storage, SEG, 20, seed=2)
    assert await writer.flush() >= 1
    await assert_reads(storage, SEG, written)
    assert writer.bytes_moved + (await rows_in_pg(db, SEG))[1] == len(written)


async def test_a_sealed_segment_moves_its_last_short_chunk_too(
    storage: PgSegmentStorage, writer: StorageWriter, db: Database
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 13)
    await writer.flush()
    assert (await rows_in_pg(db, SEG))[1] > 0
    await storage.seal(SEG)
    await writer.flush()
    assert await rows_in_pg(db, SEG) == (0, 0)
    await assert_reads(storage, SEG, written)


async def test_an_open_segment_s_short_tail_moves_once_it_has_waited_the_flush_age(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore, db: Database
) -> None:
    writer = StorageWriter(tiering, chunks, chunk_bytes=CHUNK, interval_s=0.05, max_age_s=0.5)
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await storage.create_segment(TXN, "transaction", 0, 0, 0)
    written = await fill(storage, SEG, 3)
    await fill(storage, TXN, 3, seed=3)
    assert await writer.flush() == 0  # under a chunk's worth, and not yet aged
    await asyncio.sleep(0.6)
    assert await writer.flush() == 1
    assert await rows_in_pg(db, SEG) == (0, 0)
    # A transaction's bytes wait for its merge, however old.
    assert (await rows_in_pg(db, TXN))[1] > 0
    await assert_reads(storage, SEG, written)
    # The age counts afresh from the move: bytes appended after it wait again.
    written += await fill(storage, SEG, 2, seed=2)
    assert await writer.flush() == 0
    await asyncio.sleep(0.6)
    assert await writer.flush() == 1
    assert await rows_in_pg(db, SEG) == (0, 0)
    await assert_reads(storage, SEG, written)
    assert len(await objects(chunks)) == 2


async def test_truncation_releases_whole_chunks_and_the_collector_deletes_them_after_the_grace(
    storage: PgSegmentStorage,
    writer: StorageWriter,
    collector: ChunkCollector,
    chunks: FileChunkStore,
    db: Database,
    clock: ManualClock,
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 40)
    await writer.flush()
    before = await objects(chunks)
    first = await db.fetchrow(
        "SELECT start_offset, length FROM segment_tiered_chunks WHERE segment = $1 ORDER BY 1 LIMIT 1", SEG
    )
    assert first is not None
    cut = int(first["length"]) + 10  # past the first chunk, inside the second
    await storage.truncate(SEG, cut)
    with pytest.raises(SegmentTruncated):
        await storage.read(SEG, cut - 1, 10)
    await assert_reads(storage, SEG, written, start=cut)
    # Released, not yet deleted: a read that found it just before the truncation still can.
    assert await collector.collect() == 0
    assert await objects(chunks) == before
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    assert len(await objects(chunks)) == len(before) - 1
    assert await db.fetchval("SELECT count(*) FROM tier_garbage") == 0
    await assert_reads(storage, SEG, written, start=cut)


async def test_deleting_a_segment_leaves_no_object_behind(
    storage: PgSegmentStorage,
    writer: StorageWriter,
    collector: ChunkCollector,
    chunks: FileChunkStore,
    clock: ManualClock,
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await fill(storage, SEG, 30)
    await writer.flush()
    assert await objects(chunks)
    await storage.delete(SEG)
    with pytest.raises(NoSuchSegment):
        await storage.read(SEG, 0, 10)
    clock.advance(GRACE_MS + 1)
    await collector.collect()  # stamps the released objects
    clock.advance(GRACE_MS + 1)
    await collector.collect()
    assert await objects(chunks) == []


async def test_a_merge_moves_a_transactions_tiered_chunks_by_their_index_alone(
    storage: PgSegmentStorage, writer: StorageWriter, chunks: FileChunkStore, db: Database
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await storage.create_segment(TXN, "transaction", 1, 10, 0)
    base = await fill(storage, SEG, 5)
    txn = await fill(storage, TXN, 30, seed=9)
    await writer.flush()
    on_disk = await objects(chunks)
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks WHERE segment = $1", TXN) > 0
    await storage.seal(TXN)
    assert await storage.merge(SEG, [TXN], []) == [len(base) + len(txn)]
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks WHERE segment = $1", TXN) == 0
    assert await objects(chunks) == on_disk
    await assert_reads(storage, SEG, base + txn)


async def written_not_recorded(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore
) -> tuple[bytes, ChunkRows, str]:
    """A segment of 10 appends, and its first chunk's object written as a writer writes it (its
    name listed as garbage first), not yet recorded: (bytes written, the rows, the object's name)."""
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 10)
    rows = await tiering.chunk_rows(SEG, CHUNK)
    assert rows is not None
    name = chunk_name()
    await tiering.intend(name)
    await chunks.put(name, rows.pieces)
    return written, rows, name


async def test_a_crash_between_writing_an_object_and_recording_it_leaves_garbage_for_the_collector(
    storage: PgSegmentStorage,
    tiering: PgTiering,
    writer: StorageWriter,
    collector: ChunkCollector,
    chunks: FileChunkStore,
    db: Database,
    clock: ManualClock,
) -> None:
    written, _rows, _name = await written_not_recorded(storage, tiering, chunks)
    # ... and the writer dies here: the bytes are still PostgreSQL's, the object nobody's.
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks") == 0
    await assert_reads(storage, SEG, written)
    assert await collector.collect() == 0
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    assert await objects(chunks) == []
    # The next writer moves the same bytes afresh.
    assert await writer.flush() >= 1
    await assert_reads(storage, SEG, written)


async def test_a_move_is_abandoned_when_a_truncation_changed_its_rows(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore, db: Database
) -> None:
    written, rows, name = await written_not_recorded(storage, tiering, chunks)
    await storage.truncate(SEG, len(rows.pieces[0]))  # the first row goes
    assert not await tiering.record(SEG, rows, name)
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks") == 0
    assert await db.fetchval("SELECT count(*) FROM tier_garbage WHERE object = $1", name) == 1
    await assert_reads(storage, SEG, written, start=len(rows.pieces[0]))


async def test_an_object_the_collector_claimed_can_no_longer_be_recorded(
    storage: PgSegmentStorage,
    tiering: PgTiering,
    collector: ChunkCollector,
    chunks: FileChunkStore,
    db: Database,
    clock: ManualClock,
) -> None:
    written, rows, name = await written_not_recorded(storage, tiering, chunks)
    # A writer so slow that its object outlived the grace: the collector takes it first.
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    assert not await tiering.record(SEG, rows, name)
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks") == 0
    await assert_reads(storage, SEG, written)


async def test_a_chunk_the_index_names_but_the_store_lost_is_a_retryable_failure_not_a_short_read(
    storage: PgSegmentStorage, writer: StorageWriter, chunks: FileChunkStore
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await fill(storage, SEG, 20)
    await writer.flush()
    lost = (await objects(chunks))[0]
    await chunks.delete(lost)
    with pytest.raises(StoreUnavailable):
        for offset in range(0, 3 * CHUNK, 500):
            await storage.read(SEG, offset, CHUNK)


async def test_tiered_bytes_without_a_chunk_store_are_a_retryable_failure(
    storage: PgSegmentStorage, writer: StorageWriter, db: Database, clock: ManualClock
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await fill(storage, SEG, 20)
    await writer.flush()
    with pytest.raises(StoreUnavailable):
        await PgSegmentStorage(db, clock).read(SEG, 0, 100)


async def test_the_writer_keeps_going_through_a_chunk_store_outage(
    storage: PgSegmentStorage, tiering: PgTiering, db: Database, tmp_path: Path
) -> None:
    root = tmp_path / "flaky"
    broken = FileChunkStore(root)
    broken.prepare()
    writer = StorageWriter(tiering, broken, chunk_bytes=CHUNK, interval_s=0.01)
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 20)
    os.rename(root, tmp_path / "away")
    root.write_text("a file where the directory was")
    task = asyncio.create_task(writer.run())
    try:
        for _ in range(200):
            if writer.failure is not None:
                break
            await asyncio.sleep(0.01)
        assert writer.failure is not None
        assert (await rows_in_pg(db, SEG))[1] == len(written)
        root.unlink()
        os.rename(tmp_path / "away", root)
        for _ in range(300):
            if writer.failure is None and writer.chunks_written:
                break
            await asyncio.sleep(0.01)
        assert writer.failure is None and writer.chunks_written >= 1
    finally:
        task.cancel()
    await assert_reads(PgSegmentStorage(db, ManualClock(0), chunks=broken), SEG, written)


# --- races (tests/store/test_versioned_races.py lists these two tables as covered here) -----------


async def test_two_writers_moving_the_same_rows_record_them_once(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore, db: Database
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 10)
    rows = await tiering.chunk_rows(SEG, CHUNK)
    assert rows is not None
    names = [chunk_name(), chunk_name()]
    for name in names:
        await tiering.intend(name)
        await chunks.put(name, rows.pieces)
    outcomes = await asyncio.gather(*(tiering.record(SEG, rows, name) for name in names))
    assert sorted(outcomes) == [False, True]
    loser = names[outcomes.index(False)]
    assert await db.fetchval("SELECT count(*) FROM segment_tiered_chunks") == 1
    assert await db.fetchval("SELECT object FROM tier_garbage") == loser
    await assert_reads(storage, SEG, written)


async def test_two_collectors_claim_each_object_once(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore, db: Database, clock: ManualClock
) -> None:
    for _ in range(5):
        name = chunk_name()
        await tiering.intend(name)
        await chunks.put(name, [b"orphan"])
    clock.advance(GRACE_MS + 1)
    due = await tiering.due_garbage(GRACE_MS, 100)
    assert len(due) == 5
    first, second = await asyncio.gather(tiering.claim_garbage(due), tiering.claim_garbage(due))
    assert sorted(first + second) == sorted(name for name, _ in due)
    assert not set(first) & set(second)
    # A claim at a stale version (the row changed since it was read) takes nothing.
    assert await tiering.claim_garbage(due) == []


async def test_the_analysts_view_says_where_each_segments_bytes_are(
    storage: PgSegmentStorage, writer: StorageWriter, db: Database
) -> None:
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await storage.create_segment("scope/_kvt/0.#epoch.0", "table", 1, 10, 0)
    written = await fill(storage, SEG, 40)
    moved = await writer.flush()
    row = await db.fetchrow("SELECT * FROM reporting.segment_storage WHERE segment = $1", SEG)
    assert row is not None
    assert (row["scope"], row["stream"], row["kind"], row["length"]) == (
        "scope",
        "stream",
        "stream",
        len(written),
    )
    assert row["tiered_chunks"] == moved
    assert row["postgres_bytes"] + row["tiered_bytes"] == len(written)
    assert 0 < row["postgres_bytes"] < CHUNK
    assert await db.fetchval("SELECT count(*) FROM reporting.segment_storage") == 1  # no table segment


def throttled(
    storage: PgSegmentStorage, tiering: PgTiering, chunks: FileChunkStore, bound: int
) -> tuple[StorageWriter, TierThrottle]:
    """A writer telling a throttle of `bound` bytes, which `storage` consults; one container."""
    throttle = TierThrottle(bound, 5.0, lambda _segment: 2)
    storage.throttle = throttle
    writer = StorageWriter(
        tiering,
        chunks,
        chunk_bytes=CHUNK,
        interval_s=0.01,
        container_of=lambda _segment: 2,
        throttle=throttle,
    )
    return writer, throttle


async def test_the_writer_throttles_a_container_whose_chunks_cannot_move_and_releases_it_after(
    storage: PgSegmentStorage, tiering: PgTiering, db: Database, tmp_path: Path
) -> None:
    root = tmp_path / "flaky"
    chunks = FileChunkStore(root)
    chunks.prepare()
    writer, throttle = throttled(storage, tiering, chunks, CHUNK)
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await fill(storage, SEG, 20)
    os.rename(root, tmp_path / "away")
    root.write_text("a file where the directory was")
    with pytest.raises(ChunkStoreError):
        await writer.flush()
    assert throttle.over == frozenset({2})
    waiting = storage.admission(SEG)
    assert waiting is not None
    root.unlink()
    os.rename(tmp_path / "away", root)
    await writer.flush()
    await asyncio.wait_for(waiting, 1.0)
    assert throttle.over == frozenset()
    assert storage.admission(SEG) is None


class _HangingPuts(FileChunkStore):
    """A chunk store whose writes wait until released (a store that accepts connections and does
    not answer, or one its client keeps retrying)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hanging = asyncio.Event()
        self.release = asyncio.Event()

    async def put(self, name: str, pieces: Sequence[bytes]) -> None:
        self.hanging.set()
        await self.release.wait()
        await super().put(name, pieces)


async def test_the_throttle_hears_the_backlog_grow_while_a_chunk_write_hangs(
    storage: PgSegmentStorage, tiering: PgTiering, tmp_path: Path
) -> None:
    chunks = _HangingPuts(tmp_path / "slow")
    chunks.prepare()
    writer, throttle = throttled(storage, tiering, chunks, 2 * CHUNK)
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    await fill(storage, SEG, 5)
    task = asyncio.create_task(writer.run())
    try:
        await asyncio.wait_for(chunks.hanging.wait(), 5)
        assert throttle.over == frozenset()
        await fill(storage, SEG, 40, seed=2)  # several chunks more while the first write hangs
        for _ in range(300):
            if throttle.over:
                break
            await asyncio.sleep(0.01)
        assert throttle.over == frozenset({2})
        chunks.release.set()
        for _ in range(500):
            if not throttle.over:
                break
            await asyncio.sleep(0.01)
        assert throttle.over == frozenset()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def a_write_hanging(
    storage: PgSegmentStorage, tiering: PgTiering, tmp_path: Path, renew_every_s: float
) -> tuple[_HangingPuts, StorageWriter, ChunkCollector, bytes, asyncio.Task[int]]:
    """A segment of 10 appends whose first chunk's write hangs in a writer pass (the task) until
    released: (the chunk store, the writer, a collector, the bytes written, the pass)."""
    chunks = _HangingPuts(tmp_path / "slow")
    chunks.prepare()
    writer = StorageWriter(tiering, chunks, chunk_bytes=CHUNK, interval_s=0.05, renew_every_s=renew_every_s)
    collector = ChunkCollector(tiering, chunks, grace_ms=GRACE_MS, interval_s=0.05)
    await storage.create_segment(SEG, "stream", 1, 10, 0)
    written = await fill(storage, SEG, 10)
    moving = asyncio.create_task(writer.flush())
    await asyncio.wait_for(chunks.hanging.wait(), 5)
    return chunks, writer, collector, written, moving


async def test_an_object_still_being_written_is_not_collected_however_long_its_write_takes(
    storage: PgSegmentStorage, tiering: PgTiering, db: Database, clock: ManualClock, tmp_path: Path
) -> None:
    chunks, writer, collector, written, moving = await a_write_hanging(storage, tiering, tmp_path, 0.01)
    clock.advance(GRACE_MS + 1)  # the write has outlived the grace ...
    await asyncio.sleep(0.2)  # ... and the writer has said since that it is still at it
    assert await collector.collect() == 0
    chunks.release.set()
    assert await asyncio.wait_for(moving, 5) >= 1
    recorded = await db.fetch("SELECT object FROM segment_tiered_chunks WHERE segment = $1", SEG)
    assert {r["object"] for r in recorded} == set(await objects(chunks))
    assert writer.moves_abandoned == 0
    await assert_reads(PgSegmentStorage(db, clock, chunks=chunks), SEG, written)


async def test_an_object_collected_while_its_write_was_in_flight_is_listed_again_and_collected(
    storage: PgSegmentStorage, tiering: PgTiering, db: Database, clock: ManualClock, tmp_path: Path
) -> None:
    # The writer cannot say it is still at it (it renews too rarely here, as one cut off from the
    # database would): the collector deletes the name before the write lands.
    chunks, writer, collector, written, moving = await a_write_hanging(storage, tiering, tmp_path, 3600)
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    chunks.release.set()
    assert await asyncio.wait_for(moving, 5) == 0
    assert writer.moves_abandoned == 1
    assert len(await objects(chunks)) == 1  # the write landed after the deletion ...
    assert await db.fetchval("SELECT count(*) FROM tier_garbage") == 1  # ... and is garbage again
    assert await collector.collect() == 0  # with a grace of its own
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    assert await objects(chunks) == []
    await assert_reads(storage, SEG, written)


async def test_an_object_claimed_when_it_is_listed_again_is_listed_once_the_collector_has_let_go(
    storage: PgSegmentStorage, tiering: PgTiering, db: Database, clock: ManualClock, tmp_path: Path
) -> None:
    chunks, writer, collector, written, moving = await a_write_hanging(storage, tiering, tmp_path, 3600)
    clock.advance(GRACE_MS + 1)
    # A collector mid-pass: it has claimed the name and deleted it, not yet forgotten it ...
    claimed = await tiering.claim_garbage(await tiering.due_garbage(GRACE_MS, 10))
    assert len(claimed) == 1
    await chunks.delete(claimed[0])
    chunks.release.set()  # ... when the write lands and the writer finds the name claimed.
    assert await asyncio.wait_for(moving, 5) == 0
    await tiering.forget_garbage(claimed)
    assert await db.fetchval("SELECT count(*) FROM tier_garbage") == 0
    assert len(await objects(chunks)) == 1
    # The writer's next pass lists it (and moves the bytes afresh); the collector takes it after the grace.
    await writer.flush()
    assert await db.fetchval("SELECT count(*) FROM tier_garbage WHERE object = $1", claimed[0]) == 1
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    recorded = await db.fetch("SELECT object FROM segment_tiered_chunks WHERE segment = $1", SEG)
    assert {r["object"] for r in recorded} == set(await objects(chunks))
    await assert_reads(PgSegmentStorage(db, clock, chunks=chunks), SEG, written)


async def test_an_object_the_store_will_not_delete_does_not_hold_up_the_objects_behind_it(
    tiering: PgTiering,
    collector: ChunkCollector,
    chunks: FileChunkStore,
    db: Database,
    clock: ManualClock,
    tmp_path: Path,
) -> None:
    names = []
    for _ in range(4):
        name = chunk_name()
        await tiering.intend(name)
        await chunks.put(name, [b"orphan"])
        names.append(name)
        clock.advance(1)
    # The oldest one, first in the queue, cannot be deleted: a directory with a file in it stands
    # at its name (what a file the store may not remove looks like, even to root).
    stuck = tmp_path / "chunks" / names[0]
    stuck.unlink()
    (stuck / "inside").mkdir(parents=True)
    clock.advance(GRACE_MS + 1)
    with pytest.raises(ChunkStoreError):
        await collector.collect()
    assert await collector.collect() == 3
    assert await objects(chunks) == []  # the directory is not an object
    row = await db.fetchrow("SELECT object, claimed FROM tier_garbage")
    assert row is not None and (row["object"], row["claimed"]) == (names[0], True)
    # It is tried again after a grace of its own, and goes once the store lets it.
    assert await collector.collect() == 0
    stuck.joinpath("inside").rmdir()
    stuck.rmdir()
    clock.advance(GRACE_MS + 1)
    assert await collector.collect() == 1
    assert await db.fetchval("SELECT count(*) FROM tier_garbage") == 0
