"""What the segment-data tests share: a small asyncpg pool on the test's own database, and a
long-term tier's chunk store in the test's own directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.chunks.filesystem import FileChunkStore
from app.store.db import Database
from app.store.pool import create_pool


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    pool = await create_pool(db_url, min_size=1, max_size=6)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def chunks(tmp_path: Path) -> AsyncIterator[FileChunkStore]:
    store = FileChunkStore(tmp_path / "chunks")
    store.prepare()
    yield store
    await store.close()
