"""Pravega's Java client against `serve`, every check compared with Pravega 0.13 standalone: a
check that fails on `serve`, or whose outcome differs from Pravega's without a row in
docs/compatibility.md, fails this test (the runner's lines say which and how)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.testing.served import ServedProcess, start_served
from tests.conformance.java_suite import record_summary, run_suite
from tests.conformance.pravega_standalone import Standalone, start_standalone

# The first run on a machine downloads the suite's and the oracle's jars (a few hundred MiB).
pytestmark = pytest.mark.timeout(1800)


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


async def test_java_client_behaves_on_serve_as_on_pravega(
    servers: tuple[ServedProcess, Standalone], tmp_path: Path
) -> None:
    served, oracle = servers
    run = await run_suite(
        "--controller",
        served.grpc_uri,
        "--oracle",
        oracle.controller_uri,
        report=tmp_path / "report.jsonl",
        timeout_s=1500,
    )
    record_summary("plain", run)
    assert run.returncode == 0, f"{run.summary}\n{run.failures()[-20000:]}"
