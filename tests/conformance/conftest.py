"""The servers the conformance tests compare: `serve` and Pravega 0.13 standalone, side by side."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from app.testing.served import ServedProcess, start_served
from tests.conformance.pravega_standalone import Standalone, start_standalone


async def stop_when_started(starting: asyncio.Task[Standalone]) -> None:
    # Its own failure to start is not the one to report.
    with contextlib.suppress(Exception):
        (await starting).stop()


@contextlib.asynccontextmanager
async def started_pair(
    work: Path,
    serve_args: tuple[str, ...],
    serve_env: dict[str, str] | None = None,
    standalone_properties: Mapping[str, str] | None = None,
    scheme: str = "tcp",
) -> AsyncIterator[tuple[ServedProcess, Standalone]]:
    """`serve` with `serve_args` and a standalone with `standalone_properties`, started at once
    (the JVM takes the longer), both stopped on the way out."""
    (work / "serve").mkdir(parents=True)
    pravega = asyncio.create_task(
        asyncio.to_thread(start_standalone, work / "pravega", standalone_properties, scheme)
    )
    try:
        served = await start_served(work / "serve", *serve_args, env=serve_env)
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


@pytest.fixture
async def servers(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[ServedProcess, Standalone]]:
    """`serve` (authentication and TLS off) on the test's database, and a plain standalone."""
    async with started_pair(tmp_path, ("--db-url", db_url, "--segment-store-host", "localhost")) as pair:
        yield pair
