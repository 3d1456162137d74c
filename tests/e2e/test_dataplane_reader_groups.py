"""Reader groups of the real Pravega Python client against `serve` alone: a group created again
under its name (a restarted application) keeps the positions its earlier reader handed back, and
a group created at the stream's tail reads only what is written after it, exactly once and in
per-key order.

The first holds only because the store answers a conditional insert of an existing key with
TableKeyBadVersion: the client inserts the group's initial state without reading the table first,
and only that refusal makes it fetch the state that is there and keep it.
"""

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

# Above the sum of the deadlines inside, which fail a test with what the client saw.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

EVENTS = 120  # per batch
KEYS = 4
WRITE_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 40.0  # a reader's own deadline; the test waits a little longer for its result


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


async def write_batch(served: ServedProcess, tmp_path: Path, scope: str, prefix: str) -> None:
    writer = await ClientProcess.start(
        "write", tmp_path, uri=served.grpc_uri, scope=scope, stream="s", count=EVENTS, keys=KEYS,
        prefix=prefix, progress_every=EVENTS,
    )  # fmt: skip
    try:
        assert (await writer.result(WRITE_TIMEOUT_S))["written"] == EVENTS
    finally:
        await writer.kill()


async def group_read(
    served: ServedProcess, tmp_path: Path, scope: str, out: Path, **args: object
) -> ClientProcess:
    return await ClientProcess.start(
        "group-read", tmp_path, uri=served.grpc_uri, scope=scope, stream="s", group="rg",
        deadline_s=READ_TIMEOUT_S, out=str(out), **args,
    )  # fmt: skip


async def test_a_group_created_again_keeps_the_positions_its_offline_reader_handed_back(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("again", "s", 2)
        await write_batch(served, tmp_path, "again", "a")
        # The application's first run: creates the group, reads the first batch, goes offline.
        first_out = tmp_path / "first.json"
        first = await group_read(served, tmp_path, "again", first_out, reader="r1", stop_after=EVENTS)
        try:
            first_seen = await first.result(READ_TIMEOUT_S + 10)
        finally:
            await first.kill()
        assert first_seen["read"] == EVENTS, first_seen
        check_exactly_once_in_key_order(read_events(first_out), "a", EVENTS, KEYS)
        await write_batch(served, tmp_path, "again", "b")
        await controller.seal(info)
        # The restarted application creates the group under the same name and reads to the end.
        second_out = tmp_path / "second.json"
        second = await group_read(served, tmp_path, "again", second_out, reader="r2")
        try:
            second_seen = await second.result(READ_TIMEOUT_S + 10)
        finally:
            await second.kill()
    finally:
        controller.close()
    assert second_seen["ended"] is True, second_seen
    # Only the second batch: the group's state (the first reader's positions) survived.
    check_exactly_once_in_key_order(read_events(second_out), "b", EVENTS, KEYS)


async def test_a_tail_group_reads_only_what_is_written_after_it_exactly_once_in_key_order(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("tail", "s", 2)
        await write_batch(served, tmp_path, "tail", "a")
        out = tmp_path / "tail.json"
        reader = await group_read(served, tmp_path, "tail", out, reader="r1", tail=True)
        try:
            await reader.until(lambda p: p.get("created") is True, READ_TIMEOUT_S)
            await write_batch(served, tmp_path, "tail", "b")
            await controller.seal(info)
            seen = await reader.result(READ_TIMEOUT_S + 10)
        finally:
            await reader.kill()
    finally:
        controller.close()
    assert seen["ended"] is True, seen
    check_exactly_once_in_key_order(read_events(out), "b", EVENTS, KEYS)
