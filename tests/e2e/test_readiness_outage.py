"""Readiness follows the database (defect 11): a `serve` process on a PostgreSQL of its own turns
not ready within READY_BOUND_S of that PostgreSQL stopping, says so without naming the database's
host or port, and turns ready again once the database is back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from app.embedded_pg import EmbeddedPostgres
from app.store.migrate import upgrade_to_head
from app.testing.served import ServedProcess, start_served
from tests.support.db import throwaway_cluster

# The bound this test holds the probe to (app/services/health.py: interval + ping timeout).
READY_BOUND_S = 0.5
# A frozen server is noticed by the ping's timeout alone, which takes the whole bound; the slack
# is the timers' and this poll's own lateness on a busy machine.
FROZEN_SLACK_S = 0.3
POLL_S = 0.01


async def _readiness(http: aiohttp.ClientSession, served: ServedProcess) -> bool:
    async with http.get(f"{served.rest_base}/v1/health/readiness") as response:
        assert response.status == 200
        ready = await response.json()
        assert isinstance(ready, bool)
        return ready


async def _until(http: aiohttp.ClientSession, served: ServedProcess, ready: bool, timeout_s: float) -> float:
    """Seconds until readiness reads `ready`; fails after `timeout_s`."""
    started = time.monotonic()
    while await _readiness(http, served) is not ready:
        elapsed = time.monotonic() - started
        assert elapsed < timeout_s, f"readiness still {not ready} after {elapsed:.3f}s"
        await asyncio.sleep(POLL_S)
    return time.monotonic() - started


async def test_defect_11_readiness_turns_false_within_the_bound_when_the_database_stops(
    tmp_path: Path,
) -> None:
    with throwaway_cluster() as cluster:
        url = cluster.url()
        parts = urlsplit(url)
        await asyncio.to_thread(upgrade_to_head, url)
        served = await start_served(tmp_path, "--db-url", url)
        try:
            async with aiohttp.ClientSession() as http:
                await _until(http, served, True, timeout_s=10)

                await asyncio.to_thread(cluster.stop)
                # Measured from the moment the database is stopped; the probe may have seen the
                # shutdown begin already, in which case this is close to zero.
                took = await _until(http, served, False, timeout_s=READY_BOUND_S)
                print(f"readiness false {took * 1000:.0f} ms after the database stopped")

                async with http.get(f"{served.rest_base}/v1/health") as response:
                    body = await response.text()
                assert response.status == 200
                assert '"readiness": false' in body
                for internal in (f":{parts.port}", str(parts.hostname), "Errno", "Connect call"):
                    assert internal not in body, body

                await asyncio.to_thread(cluster.start)
                await _until(http, served, True, timeout_s=10)
            assert served.process.returncode is None, served.log()
        finally:
            code = await served.stop()
        assert code == 0, served.log()


def _server_pids(cluster: EmbeddedPostgres) -> list[int]:
    """The postmaster (first line of its pid file) and every backend it forked."""
    postmaster = int((cluster.pgdata / "postmaster.pid").read_text().splitlines()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *(int(pid) for pid in children)]


async def test_defect_11_readiness_turns_false_within_the_bound_when_the_database_freezes(
    tmp_path: Path,
) -> None:
    """A server that stops answering without closing anything (frozen, or cut off by a network
    partition): only the probe's own timeout can notice, and it does within the bound."""
    with throwaway_cluster() as cluster:
        url = cluster.url()
        await asyncio.to_thread(upgrade_to_head, url)
        served = await start_served(tmp_path, "--db-url", url)
        frozen: list[int] = []
        try:
            async with aiohttp.ClientSession() as http:
                await _until(http, served, True, timeout_s=10)
                try:
                    for pid in _server_pids(cluster):
                        os.kill(pid, signal.SIGSTOP)
                        frozen.append(pid)
                    took = await _until(http, served, False, timeout_s=READY_BOUND_S + FROZEN_SLACK_S)
                    print(f"readiness false {took * 1000:.0f} ms after the database froze")
                finally:
                    for pid in frozen:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGCONT)
                await _until(http, served, True, timeout_s=10)
            assert served.process.returncode is None, served.log()
        finally:
            code = await served.stop()
        assert code == 0, served.log()
