"""Append blocks the store packs with lz4 (app/store/chunk_packing.py, migration 0026): packed
when lz4 saves an eighth, stored as they came otherwise, and every path that reads chunk rows
(reads at any offset, truncation, merges, the move to the long-term tier, the storage reports)
sees the bytes as appended, rows written before 0026 included."""

from __future__ import annotations

import os
import random

import lz4.block
import pytest

from app.chunks.filesystem import FileChunkStore
from app.domain.errors import StoreUnavailable
from app.segmentstore.storage import AppendRequest, SegmentTruncated
from app.store.chunk_packing import PACK_FROM, pack
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.store.storage_report import PgSegmentStorageReport
from app.store.storage_writer import StorageWriter
from app.store.tiering import PgTiering
from app.testing.clock import ManualClock

SEGMENT = "scope/stream/0.#epoch.0"
TXN = SEGMENT + "#transaction.00000000000000000000000000000001"
BLOCK = 1024 * 1024


def text_block(first_event: int, size: int) -> bytes:
    """Events of 1 KiB as the bench writes them: a numbered head, then padding."""
    out = bytearray()
    event = first_event
    while len(out) < size:
        head = f"e000:{event:08d}|".encode()
        out += head + b"x" * (1024 - len(head))
        event += 1
    return bytes(out[:size])


async def stored_rows(db: Database, segment: str) -> list[tuple[int, int | None, int, str | None]]:
    rows = await db.fetch(
        "SELECT start_offset, lz4_length, octet_length(data) AS stored, pg_column_compression(data) AS method"
        " FROM segment_chunks WHERE segment = $1 ORDER BY start_offset",
        segment,
    )
    return [(r["start_offset"], r["lz4_length"], r["stored"], r["method"]) for r in rows]


async def test_compressible_blocks_are_packed_and_others_stored_as_they_came(db: Database) -> None:
    storage = PgSegmentStorage(db, ManualClock(5_000))
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    text, noise, small = text_block(0, BLOCK), os.urandom(BLOCK), text_block(7, PACK_FROM - 1)
    for number, data in enumerate((text, noise, small), start=1):
        await storage.append(AppendRequest(SEGMENT, 1, data, number, 1))
    rows = await stored_rows(db, SEGMENT)
    # The packed block crosses and rests compressed; PostgreSQL compresses nothing itself any more.
    assert [(start, size, method) for start, size, _stored, method in rows] == [
        (0, BLOCK, None),
        (BLOCK, None, None),
        (2 * BLOCK, None, None),
    ], rows
    assert rows[0][2] < BLOCK // 20, rows
    assert rows[1][2] == BLOCK and rows[2][2] == PACK_FROM - 1, rows
    whole = text + noise + small
    assert (await storage.read(SEGMENT, 0, len(whole))).data == whole
    assert (await storage.segment_state(SEGMENT)).length == len(whole)
    # Inside each chunk and across both boundaries.
    assert (await storage.read(SEGMENT, BLOCK - 100, 200)).data == text[-100:] + noise[:100]
    assert (await storage.read(SEGMENT, 2 * BLOCK - 5, 10)).data == noise[-5:] + small[:5]
    assert (await storage.read(SEGMENT, 10, 0)).data == b""


async def test_reads_at_any_offset_and_length_match_the_bytes_appended(db: Database) -> None:
    """Packed, unpacked, small and pre-0026 rows mixed in one segment, read at random spans."""
    storage = PgSegmentStorage(db, ManualClock(5_000))
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    rng = random.Random(26)
    written = b""
    for number in range(1, 25):
        kind = number % 4
        size = rng.randint(PACK_FROM, 300_000) if kind != 3 else rng.randint(1, PACK_FROM)
        data = rng.randbytes(size) if kind == 1 else text_block(len(written) // 1024, size)
        if kind == 2:
            # A row as a store before 0026 wrote it: the bytes as they came, no lz4_length.
            await db.execute(
                "INSERT INTO segment_chunks (segment, start_offset, data) VALUES ($1, $2, $3)",
                SEGMENT, len(written), data,
            )  # fmt: skip
            await db.execute(
                "UPDATE embedded_segments SET length = $2 WHERE name = $1", SEGMENT, len(written) + size
            )
        else:
            await storage.append(AppendRequest(SEGMENT, 1, data, number, 1))
        written += data
    sizes = [size for _start, size, _stored, _method in await stored_rows(db, SEGMENT)]
    assert sum(size is not None for size in sizes) >= 6, sizes
    spans = [(0, len(written)), (len(written) - 1, 10), (len(written), 5)]
    spans += [(rng.randrange(len(written)), rng.choice((1, 100, 5000, 2 * BLOCK))) for _ in range(200)]
    for offset, length in spans:
        result = await storage.read(SEGMENT, offset, length)
        assert result.data == written[offset : offset + length], (offset, length)
        assert result.length == len(written)


async def test_truncation_and_merges_keep_packed_bytes_whole(db: Database) -> None:
    storage = PgSegmentStorage(db, ManualClock(5_000))
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    first, second = text_block(0, 8192), text_block(8, 8192)
    await storage.append(AppendRequest(SEGMENT, 1, first, 1, 8))
    await storage.append(AppendRequest(SEGMENT, 1, second, 2, 8))
    await storage.create_segment(TXN, "transaction", 0, 0, 0)
    in_txn = text_block(100, 50_000)
    await storage.append(AppendRequest(TXN, 2, in_txn, 1, 49))
    assert [size for _s, size, _b, _m in await stored_rows(db, TXN)] == [len(in_txn)]
    assert await storage.merge(SEGMENT, [TXN], []) == [16384 + len(in_txn)]
    written = first + second + in_txn
    assert (await storage.read(SEGMENT, 16000, 1000)).data == written[16000:17000]
    # A truncation inside the second packed chunk drops the first, keeps the second whole.
    await storage.truncate(SEGMENT, 9000)
    assert [(start, size) for start, size, _b, _m in await stored_rows(db, SEGMENT)] == [
        (8192, 8192), (16384, len(in_txn)),
    ]  # fmt: skip
    assert (await storage.read(SEGMENT, 9000, 100_000)).data == written[9000:]
    with pytest.raises(SegmentTruncated):
        await storage.read(SEGMENT, 8999, 10)
    report = await PgSegmentStorageReport(db).stream_segments("scope", "stream")
    assert [(s.segment, s.postgres_bytes, s.postgres_chunks) for s in report] == [
        (SEGMENT, 8192 + len(in_txn), 2)
    ]
    viewed = await db.fetchrow(
        "SELECT postgres_bytes, postgres_chunks FROM reporting.segment_storage WHERE segment = $1", SEGMENT
    )
    assert viewed is not None and (viewed["postgres_bytes"], viewed["postgres_chunks"]) == (
        8192 + len(in_txn),
        2,
    )


async def test_the_long_term_tier_gets_the_bytes_as_appended(db: Database, chunks: FileChunkStore) -> None:
    clock = ManualClock(5_000)
    storage = PgSegmentStorage(db, clock, chunks=chunks)
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    blocks = [text_block(i * 64, 65_536) if i % 2 == 0 else os.urandom(65_536) for i in range(6)]
    for number, data in enumerate(blocks, start=1):
        await storage.append(AppendRequest(SEGMENT, 1, data, number, 64))
    await storage.seal(SEGMENT)
    tiering = PgTiering(db, clock)
    assert [b.bytes for b in await tiering.backlog() if b.segment == SEGMENT] == [6 * 65_536]
    writer = StorageWriter(tiering, chunks, chunk_bytes=2 * 65_536, interval_s=0.05)
    assert await writer.flush() == 3
    assert writer.bytes_moved == 6 * 65_536
    assert await stored_rows(db, SEGMENT) == []
    objects = await db.fetch(
        "SELECT object, length FROM segment_tiered_chunks WHERE segment = $1 ORDER BY start_offset", SEGMENT
    )
    contents = [await chunks.get(str(o["object"]), 0, int(o["length"])) for o in objects]
    assert b"".join(contents) == b"".join(blocks)
    assert (await storage.read(SEGMENT, 60_000, 200_000)).data == b"".join(blocks)[60_000:260_000]


async def test_a_packed_chunk_that_does_not_unpack_is_a_clear_store_error(db: Database) -> None:
    storage = PgSegmentStorage(db, ManualClock(5_000))
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    await storage.append(AppendRequest(SEGMENT, 1, text_block(0, 8192), 1, 8))
    await db.execute("UPDATE segment_chunks SET data = $2 WHERE segment = $1", SEGMENT, b"\xff" * 40)
    with pytest.raises(StoreUnavailable, match="does not unpack"):
        await storage.read(SEGMENT, 0, 100)
    await db.execute("UPDATE segment_chunks SET data = $2 WHERE segment = $1", SEGMENT,
                     lz4.block.compress(text_block(0, 4096), store_size=False))  # fmt: skip
    with pytest.raises(StoreUnavailable, match="unpack"):
        await storage.read(SEGMENT, 0, 100)


def test_pack_leaves_what_does_not_shrink_by_an_eighth() -> None:
    assert pack(b"x" * (PACK_FROM - 1)) == (b"x" * (PACK_FROM - 1), None)
    stored, size = pack(memoryview(text_block(0, 4096)))
    assert size == 4096 and len(stored) < 512
    noise = os.urandom(4096)
    assert pack(noise) == (noise, None)
    # lz4 saves a little here, less than an eighth: not worth unpacking on every read.
    half = os.urandom(3800) + b"y" * 296
    assert pack(half) == (half, None)
