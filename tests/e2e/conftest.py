from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.testing.served import ServedProcess, start_served


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_served(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()
