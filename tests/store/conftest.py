"""The pool the segment-data tests share: a small asyncpg pool on the test's own database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store.db import Database
from app.store.pool import create_pool


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    pool = await create_pool(db_url, min_size=1, max_size=6)
    try:
        yield pool
    finally:
        await pool.close()
