"""The real Pravega Python client against `serve --processes 2`: its controller connections land on
either child (the kernel spreads them), its segment connections reach child 0's embedded store,
and a reader group of two reads back exactly the events written, in per-key order, across a scale
made while they are written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.testing.served import ServedProcess
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    check_exactly_once_in_key_order,
    read_events,
    start_with_segment_store,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

EVENTS = 20_000
KEYS = 20
WRITE_RATE = 4_000  # paced, so the scale lands while events flow
TIMEOUT_S = 120.0


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url, "--processes", "2")
    try:
        yield instance
    finally:
        assert await instance.stop() == 0, instance.log()


async def test_the_client_writes_and_reads_exactly_once_through_two_processes(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("procs", "s", 2)
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="procs", stream="s", group="rg", readers=2,
            deadline_s=TIMEOUT_S * 2, out=str(out),
        )  # fmt: skip
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope="procs", stream="s", count=EVENTS, keys=KEYS,
            inflight=1000, progress_every=2000, rate=WRITE_RATE,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= EVENTS // 3, TIMEOUT_S)
            # Through whichever child this channel reached; the client's own connections see it too.
            split = await controller.scale(info, [0], [(0.0, 0.25), (0.25, 0.5)])
            assert len(split) == 3, split
            written = await writer.result(TIMEOUT_S)
            assert written["written"] == EVENTS
            await reader.until(lambda p: p["read"] >= EVENTS, TIMEOUT_S)
            await controller.seal(info)
            seen = await reader.result(TIMEOUT_S)
        finally:
            await writer.kill()
            await reader.kill()
        assert seen["ended"] is True, seen
        check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
    finally:
        controller.close()
