"""Appended bytes are TOASTed with lz4 when they compress (migration 0021), stored as they came
when they do not, and read back the same either way."""

from __future__ import annotations

import os

from app.segmentstore.storage import AppendRequest
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

SEGMENT = "scope/stream/0.#epoch.0"
BLOCK = 1024 * 1024


async def test_compressible_blocks_are_stored_lz4_and_random_ones_as_they_came(db: Database) -> None:
    storage = PgSegmentStorage(db, ManualClock(5_000))
    await storage.create_segment(SEGMENT, "stream", 0, 0, 0)
    text = (b"e000:00000001|" + b"x" * 1010) * (BLOCK // 1024)
    noise = os.urandom(BLOCK)
    await storage.append(AppendRequest(SEGMENT, 1, text, 1, 1024))
    await storage.append(AppendRequest(SEGMENT, 1, noise, 2, 1024))
    rows = await db.fetch(
        "SELECT start_offset, pg_column_compression(data) AS method, pg_column_size(data) AS stored "
        "FROM segment_chunks WHERE segment = $1 ORDER BY start_offset",
        SEGMENT,
    )
    assert [(r["start_offset"], r["method"]) for r in rows] == [(0, "lz4"), (BLOCK, None)], rows
    assert rows[0]["stored"] < BLOCK // 20, rows[0]["stored"]
    assert rows[1]["stored"] >= BLOCK, rows[1]["stored"]
    assert (await storage.read(SEGMENT, 0, 2 * BLOCK)).data == text + noise
    # A read inside each chunk, across their boundary.
    assert (await storage.read(SEGMENT, BLOCK - 100, 200)).data == text[-100:] + noise[:100]
