"""The servers the conformance tests compare: `serve` and Pravega 0.13 standalone, side by side."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.testing.served import ServedProcess, start_served
from tests.conformance.pravega_standalone import Standalone, start_standalone


async def stop_when_started(starting: asyncio.Task[Standalone]) -> None:
    # Its own failure to start is not the one to report.
    with contextlib.suppress(Exception):
        (await starting).stop()


@pytest.fixture
async def servers(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[ServedProcess, Standalone]]:
    """`serve` and Pravega standalone, started side by side (the JVM takes the longer)."""
    work = tmp_path / "serve"
    work.mkdir()
    pravega = asyncio.create_task(asyncio.to_thread(start_standalone, tmp_path / "pravega"))
    try:
        served = await start_served(work, "--db-url", db_url, "--segment-store-host", "localhost")
    except BaseException:
        await stop_when_started(pravega)
        raise
    try:
        oracle = await pravega
    except BaseException:
        await served.stop()
        raise
    try:
        yield served, oracle
    finally:
        oracle.stop()
        code = await served.stop()
        assert code == 0, served.log()[-6000:]
