"""Issue 32, item 8: a database outage must not turn the clients into a retry storm. A `serve` on
a PostgreSQL of its own, the real Python client writing through it; the database stops for longer
than the segment store's heartbeat expiry. Once expired, the store cannot tell whether it still
owns its containers: it closes the connection, as Pravega's store does for a container that is
not running, and the client backs off. Answering WrongHost instead sent the client to getURI,
which named the same store again (the map cannot change without the database): about 800 getURI
calls a second, each an access-log line. Meanwhile the service answers its probes at once, its
memory holds, and once the database is back every event the client wrote is read back, once and
in order."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import aiohttp
import pytest

from app.store.migrate import upgrade_to_head
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    check_exactly_once_in_key_order,
    read_events,
    start_with_segment_store,
)
from tests.support.db import throwaway_cluster
from tests.support.hostile import p99, rss_kb

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

SCOPE, STREAM, KEYS, PREFIX = "outage", "events", 4, "o"
RATE, COUNT = 20, 640
EXPIRY_S = 3.0
# Past the expiry long enough for a storm to show: the store fenced itself for most of it.
OUTAGE_S = 12.0
# getURI calls a writer makes in a healthy run (one per segment it sets up, and a few around the
# outage's start and end); the storm made thousands.
MOST_GET_URI = 60
GET_URI = re.compile(r"gRPC getURI ")


async def _probe(http: aiohttp.ClientSession, base: str, stop: asyncio.Event) -> list[float]:
    """Liveness calls back to back until `stop`: each one's seconds."""
    took: list[float] = []
    while not stop.is_set():
        started = time.monotonic()
        async with http.get(f"{base}/v1/health/liveness") as response:
            assert response.status == 200, await response.text()
        took.append(time.monotonic() - started)
        await asyncio.sleep(0.05)
    return took


async def test_writers_back_off_through_a_database_outage_and_lose_nothing(tmp_path: Path) -> None:
    with throwaway_cluster() as cluster:
        url = cluster.url()
        await asyncio.to_thread(upgrade_to_head, url)
        served = await start_with_segment_store(
            tmp_path,
            *("--db-url", url, "--access-log-alike-per-second", "0"),
            *("--segment-store-heartbeat-s", "0.5", "--segment-store-expiry-s", str(EXPIRY_S)),
        )
        controller = Controller(served)
        writer: ClientProcess | None = None
        try:
            await controller.create_stream(SCOPE, STREAM, 2)
            uri = f"tcp://127.0.0.1:{served.grpc_port}"
            writer = await ClientProcess.start(
                "write",
                tmp_path,
                uri=uri,
                scope=SCOPE,
                stream=STREAM,
                count=COUNT,
                keys=KEYS,
                prefix=PREFIX,
                rate=RATE,
                progress_every=20,
            )
            await writer.until(lambda report: report["acked"] >= 60, timeout_s=60)
            calls_before = len(GET_URI.findall(served.log()))
            rss_before = rss_kb(served.process.pid)

            async with aiohttp.ClientSession() as http:
                stop = asyncio.Event()
                probe = asyncio.create_task(_probe(http, served.rest_base, stop))
                await asyncio.to_thread(cluster.stop)
                await asyncio.sleep(OUTAGE_S)
                rss_during = rss_kb(served.process.pid)
                calls_during = len(GET_URI.findall(served.log())) - calls_before
                await asyncio.to_thread(cluster.start)
                stop.set()
                latencies = await probe

            assert calls_during < MOST_GET_URI, (
                f"{calls_during} getURI calls in a {OUTAGE_S} s outage: the writer is not backing off"
            )
            assert p99(latencies) < 1.0, f"liveness p99 {p99(latencies):.3f} s during the outage"
            assert rss_during - rss_before < 100 * 1024, (rss_before, rss_during)
            # The client backs off up to 10 s between attempts; the store serves again once a
            # heartbeat lands and it has read the map.
            result = await writer.result(timeout_s=120)
            assert result["written"] == COUNT

            reader = await ClientProcess.start(
                "read",
                tmp_path,
                uri=uri,
                scope=SCOPE,
                stream=STREAM,
                group="after-outage",
                out=str(tmp_path / "read.json"),
                deadline_s=60,
                until_end=False,
                stop_after=COUNT,
            )
            read = await reader.result(timeout_s=90)
            assert read["read"] == COUNT, read
            check_exactly_once_in_key_order(read_events(tmp_path / "read.json"), PREFIX, COUNT, KEYS)
            log = served.log()
            assert "its containers are not ready" in log, log[-4000:]
            assert "Traceback" not in _store_lines(log), log[-4000:]
        finally:
            if writer is not None:
                await writer.kill()
            controller.close()
            await served.stop()


def _store_lines(log: str) -> str:
    """The segment store's own lines (asyncpg's pool logs its reconnect attempts with tracebacks
    of its own, which say the database is down, once a second)."""
    keep: list[str] = []
    taking = False
    for line in log.splitlines():
        if re.match(r"\d{4}-\d\d-\d\d ", line):
            taking = "segmentstore" in line or "segment-store" in line
        if taking:
            keep.append(line)
    return "\n".join(keep)
