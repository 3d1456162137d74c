"""Suite-wide fixtures: a real PostgreSQL started from local binaries, a migrated template
database, and a fresh clone of it for every test that asks for `db_url`."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store.pool import create_pool
from app.testing.clock import ManualClock
from app.testing.controller import Services, running_controller
from tests.conformance.java_suite import SUMMARIES
from tests.support.db import clone_database, create_template, drop_database, throwaway_cluster, with_database

# Every `serve` a test starts is one process unless the test asks for more (`--processes N`): the
# default, one per core, would put a supervisor between the test and the pid it signals or reads.
os.environ.setdefault("PGCONTROLLER_PROCESSES", "1")

# The order `make test` hands files to its workers (it passes --no-loadscope-reorder, so xdist
# keeps this order): the longest files first (the two chaos runs, minutes each and mostly waiting,
# then the REST contract's), then the others by their number of tests, most first, as xdist would
# order them. A file's tests stay on one worker and the suite ends when its last file does;
# ordered by count alone, the one-test chaos files came last and could run one after the other
# on one worker after every other worker was idle (19 min 16 s instead of 14 min).
_TESTS = Path(__file__).parent
LONGEST_FIRST = (
    "conformance/test_java_conformance.py",
    "e2e/test_chaos.py",
    "e2e/test_chaos_pauses.py",
    "api/test_rest_contract.py",
    # Two and a half minutes of real servers (S3Proxy's JVM among them): early, with the other long
    # ones, rather than beside the timing-sensitive hostile tests near the end.
    "e2e/test_tiered_streams.py",
    # Three and a half minutes of Spark against serve and a Pravega standalone of its own.
    "spark/test_datasource.py",
)
_SESSION_START = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION_START] = time.time()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The Java conformance runs' summary lines (`java conformance: N passed, M failed, K differ
    from Pravega (listed)`), written by whichever worker ran them during this session."""
    started = config.stash.get(_SESSION_START, 0.0)
    for path in sorted(SUMMARIES.glob("*.txt")) if SUMMARIES.is_dir() else []:
        if path.stat().st_mtime >= started:
            terminalreporter.write_line(path.read_text().strip())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [name for name in LONGEST_FIRST if not (_TESTS / name).is_file()]
    if missing:
        raise pytest.UsageError(f"LONGEST_FIRST in tests/conftest.py names missing files: {missing}")
    by_file: dict[Path, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.path, []).append(item)

    def rank(path: Path) -> tuple[int, int]:
        try:
            name = path.relative_to(_TESTS).as_posix()
        except ValueError:
            name = ""
        first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, -len(by_file[path])

    items[:] = [item for path in sorted(by_file, key=rank) for item in by_file[path]]


@pytest.fixture(autouse=True, scope="module")
def _collect_after_each_file() -> Iterator[None]:
    """Collects garbage as each test file ends, so an unclosed socket or connection fails that
    file's last test (warnings are errors) instead of a test of another file that happens to
    trigger a collection later on the same worker. Per file, not per test: a collection costs."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    with throwaway_cluster() as cluster:
        url = cluster.admin_url()
        asyncio.run(create_template(url))
        yield url


@pytest.fixture
async def db_url(pg_admin_url: str) -> AsyncIterator[str]:
    name = await clone_database(pg_admin_url)
    try:
        yield with_database(pg_admin_url, name)
    finally:
        await drop_database(pg_admin_url, name)


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url) as running:
        yield running


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Any]:
    """An asyncpg pool on the test's database (up to 4 connections), closed after the test."""
    pool = await create_pool(db_url, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def clock() -> ManualClock:
    """A hand-driven clock for the tests that move time themselves."""
    return ManualClock()
