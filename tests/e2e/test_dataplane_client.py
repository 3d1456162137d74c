"""The real Pravega Python client writing to and reading from `serve` alone (its embedded
segment store): 100,000 events over 50 routing keys survive a split and a merge made while they
are written, a reader group of two reads back exactly that set in per-key order, and the readers
end only once the stream is sealed."""

from __future__ import annotations

import time
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

# Above the sum of the deadlines inside, which fail a test with what the client saw.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

EVENTS = 100_000
KEYS = 50
# Paced, so that both scales surely land while events flow (the writer's own clock proves it).
WRITE_RATE = 10_000
WRITE_TIMEOUT_S = 120.0  # for each stage; the paced writer needs 10 s in all
READ_TIMEOUT_S = 180.0


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


async def test_events_survive_a_split_and_a_merge_and_two_readers_read_them_exactly_once(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("dp", "s", 3)
        assert [s for s, _, _ in await controller.current(info)] == [0, 1, 2]
        out = tmp_path / "read.json"
        # Readers start first, so they also cross the scale while data is flowing.
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="dp", stream="s", group="rg", readers=2,
            deadline_s=READ_TIMEOUT_S, out=str(out),
        )  # fmt: skip
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope="dp", stream="s", count=EVENTS, keys=KEYS,
            inflight=1000, progress_every=5000, rate=WRITE_RATE,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= 30_000, WRITE_TIMEOUT_S)
            # Split segment 0 ([0, 1/3)) in two while the writer keeps going.
            split = await controller.scale(info, [0], [(0.0, 1 / 6), (1 / 6, 1 / 3)])
            assert len(split) == 4, split
            await writer.until(lambda p: p["acked"] >= 60_000, WRITE_TIMEOUT_S)
            # Merge the upper half with segment 1 (two predecessors from two epochs, one
            # successor); the stream keeps its minimum of three segments.
            upper = next(s for s, low, _ in split if low == 1 / 6)
            merged = await controller.scale(info, [upper, 1], [(1 / 6, 2 / 3)])
            assert len(merged) == 3, merged
            scales_done = time.monotonic()
            written = await writer.result(WRITE_TIMEOUT_S)
            assert written["written"] == EVENTS
            assert scales_done < written["t1"], "the writer had finished before the scales"
            # Until the seal the group still has segments to read: the readers keep waiting.
            await reader.until(lambda p: p["read"] >= EVENTS and p["open_checks"] > 0, READ_TIMEOUT_S)
            await controller.seal(info)
            seen = await reader.result(READ_TIMEOUT_S)
        finally:
            await writer.kill()
            await reader.kill()
    finally:
        controller.close()
    assert seen["ended"] is True, seen
    events = read_events(out)
    check_exactly_once_in_key_order(events, "e", EVENTS, KEYS)
    # Both readers of the group took part.
    assert {r for r, _ in events} == {0, 1}


async def test_readers_wait_at_the_tail_and_end_after_the_seal(served: ServedProcess, tmp_path: Path) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("end", "s", 2)
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope="end", stream="s", count=200, keys=4,
            progress_every=100,
        )  # fmt: skip
        assert (await writer.result(60))["written"] == 200
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="end", stream="s", group="rg", readers=2,
            deadline_s=240, out=str(out),
        )  # fmt: skip
        try:
            # Everything is read and the group has been asked twice whether it is over: it is not.
            await reader.until(lambda p: p["read"] >= 200 and p["open_checks"] >= 2, 150)
            await controller.seal(info)
            seen = await reader.result(150)
        finally:
            await reader.kill()
    finally:
        controller.close()
    assert seen["ended"] is True and seen["read"] == 200, seen
    check_exactly_once_in_key_order(read_events(out), "e", 200, 4)
