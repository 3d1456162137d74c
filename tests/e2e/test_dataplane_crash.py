"""Crashes under the real Pravega Python client: a writer whose `serve` is SIGKILLed mid-write
and restarted finishes with every event present exactly once (also four writers whose `serve` is
killed inside a group commit mixing their appends), and events acknowledged before
PostgreSQL crashes (immediate shutdown: no checkpoint, only what the WAL holds survives) are all
there after it restarts."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.embedded_pg import EmbeddedPostgres
from app.store.migrate import upgrade_to_head
from app.testing.served import ServedProcess
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    check_exactly_once_in_key_order,
    read_events,
    restart_on_same_ports,
    sigkill,
    start_with_segment_store,
)

# Above the sum of the deadlines inside, which fail a test with what the client saw.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

CRASH_EVENTS, CRASH_KEYS = 50_000, 20
# Between a group of appends' commit and their DataAppended, and once a group is formed, before
# it goes to PostgreSQL (app/wiring/segment_store.py).
ACK_FAILPOINT = "segmentstore.append.before_ack"
COMMIT_FAILPOINT = "segmentstore.append.before_group_commit"


async def _read_to_end(
    served: ServedProcess, tmp_path: Path, scope: str, timeout_s: float
) -> list[tuple[int, str]]:
    out = tmp_path / f"read-{scope}.json"
    reader = await ClientProcess.start(
        "read", tmp_path, uri=served.grpc_uri, scope=scope, stream="s", group="rg", readers=2,
        deadline_s=timeout_s, out=str(out),
    )  # fmt: skip
    seen = await reader.result(timeout_s + 30)
    assert seen["ended"] is True, seen
    return read_events(out)


async def _until_parked(served: ServedProcess, point: str, timeout_s: float = 30) -> None:
    """Until a group of appends is parked at `point`."""
    deadline = time.monotonic() + timeout_s
    while f"failpoint {point} reached" not in served.log():
        assert time.monotonic() < deadline, f"no group of appends parked at {point}:\n{served.log()}"
        await asyncio.sleep(0.05)
    # The appends that arrive meanwhile queue behind the parked group, their writers' blocks in
    # flight on all three connections.
    await asyncio.sleep(0.5)


async def _sealed_and_read(served: ServedProcess, tmp_path: Path, scope: str) -> list[tuple[int, str]]:
    controller = Controller(served)
    try:
        await controller.seal(pb.StreamInfo(scope=scope, stream="s"))
    finally:
        controller.close()
    return await _read_to_end(served, tmp_path, scope, 180)


async def _stop(first: ServedProcess, restarted: ServedProcess | None) -> None:
    if restarted is not None:
        code = await restarted.stop()
        assert code == 0, restarted.log()
    elif first.process.returncode is None:
        await first.stop()


@pytest.mark.parametrize("point", [ACK_FAILPOINT, COMMIT_FAILPOINT])
async def test_a_writer_finishes_exactly_once_across_a_sigkilled_serve(
    db_url: str, tmp_path: Path, point: str
) -> None:
    # Armed mid-write, the failpoint holds the next group commit of the three segments' appends:
    # after its commit (every writer connection has committed events it was never told of, so only
    # the event number the restarted store reports at SetupAppend keeps them from being appended
    # twice), or inside its transaction (nothing of the group was committed, nor acknowledged).
    armed = tmp_path / "hold-acks"
    first = await start_with_segment_store(
        tmp_path, "--db-url", db_url, env={"PGCONTROLLER_FAILPOINTS": f"{point}=pause_when:{armed}"}
    )
    restarted: ServedProcess | None = None
    try:
        controller = Controller(first)
        try:
            await controller.create_stream("crash", "s", 3)
        finally:
            controller.close()
        writer = await ClientProcess.start(
            "write", tmp_path, uri=first.grpc_uri, scope="crash", stream="s", count=CRASH_EVENTS,
            keys=CRASH_KEYS, inflight=1000, progress_every=1000, rate=5000,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= 10_000, 120)
            armed.touch()
            await _until_parked(first, point)
            await sigkill(first)
            killed_at = time.monotonic()
            restarted = await restart_on_same_ports(tmp_path, first, "--db-url", db_url)
            # The client reconnects with the same writer ids; the store's last event number per
            # writer (stored with the data) tells it which in-flight events to send again.
            done = await writer.result(180)
        finally:
            await writer.kill()
        assert done["written"] == CRASH_EVENTS
        # The kill landed mid-write (CLOCK_MONOTONIC on both sides).
        assert done["t0"] < killed_at < done["t1"], (done, killed_at)
        events = await _sealed_and_read(restarted, tmp_path, "crash")
    finally:
        await _stop(first, restarted)
    check_exactly_once_in_key_order(events, "e", CRASH_EVENTS, CRASH_KEYS)


# 20 s of writing at the writers' rate: a group holding two writers' blocks of one segment needs
# both blocks to arrive during one commit; with commits quicker (the store's CPU per append down
# by a quarter since the test was written) and the machine loaded by other tests, 8 s (20,000
# events) once passed without one.
MANY_WRITERS, EVENTS_PER_WRITER, KEYS_PER_WRITER = 4, 50_000, 5


async def test_many_writers_finish_exactly_once_across_a_serve_killed_inside_a_group_commit(
    tmp_path: Path,
) -> None:
    # Four writer processes on a stream of two segments: the appends arriving while a group
    # commits are the next group, so the group the failpoint holds inside its transaction mixes
    # several processes' blocks; none of it is committed or acknowledged. On a PostgreSQL with
    # its durability on, as in production: the test cluster's commits (no WAL flush) are over
    # too soon for groups of several writers to form often.
    with durable_cluster() as cluster:
        await asyncio.to_thread(upgrade_to_head, cluster.url())
        await _many_writers_killed_inside_a_group_commit(cluster.url(), tmp_path)


async def _many_writers_killed_inside_a_group_commit(db_url: str, tmp_path: Path) -> None:
    armed = tmp_path / "hold-commit"
    first = await start_with_segment_store(
        tmp_path,
        "--db-url",
        db_url,
        env={"PGCONTROLLER_FAILPOINTS": f"{COMMIT_FAILPOINT}=pause_when:{armed}"},
    )
    restarted: ServedProcess | None = None
    writers: list[ClientProcess] = []
    try:
        controller = Controller(first)
        try:
            await controller.create_stream("many", "s", 2)
        finally:
            controller.close()
        for n in range(MANY_WRITERS):
            writer = await ClientProcess.start(
                "write", tmp_path, uri=first.grpc_uri, scope="many", stream="s", count=EVENTS_PER_WRITER,
                keys=KEYS_PER_WRITER, inflight=1000, progress_every=500, rate=2500, prefix=f"m{n}",
            )  # fmt: skip
            writers.append(writer)
        try:
            for writer in writers:
                await writer.until(lambda p: p["acked"] >= 2000, 120)
            # Only a group holding two writers' blocks for one segment parks: a client process
            # has one writer per segment (and one block of it in flight), so at least two
            # processes' appends are in it. Written
            # whole, then renamed into place: the store must never see the file empty (an empty
            # pattern parks any group).
            pattern = tmp_path / "hold-commit.pattern"
            pattern.write_text(r"at most ([2-9]|\d\d+) writers on one")
            pattern.rename(armed)
            await _until_parked(first, COMMIT_FAILPOINT)
            parked = re.search(
                rf"failpoint {COMMIT_FAILPOINT} reached \((\d+) appends .*\(at most (\d+) writers on one",
                first.log(),
            )
            assert parked is not None, first.log()[-3000:]
            assert int(parked[2]) >= 2, f"the group held by the failpoint: {parked[0]}"
            await sigkill(first)
            killed_at = time.monotonic()
            restarted = await restart_on_same_ports(tmp_path, first, "--db-url", db_url)
            done = [await writer.result(180) for writer in writers]
        finally:
            for writer in writers:
                await writer.kill()
        for result in done:
            assert result["written"] == EVENTS_PER_WRITER
            assert result["t0"] < killed_at < result["t1"], (result, killed_at)
        events = await _sealed_and_read(restarted, tmp_path, "many")
    finally:
        await _stop(first, restarted)
    for n in range(MANY_WRITERS):
        mine = [e for e in events if e[1].startswith(f"m{n}")]
        check_exactly_once_in_key_order(mine, f"m{n}", EVENTS_PER_WRITER, KEYS_PER_WRITER)
    assert len(events) == MANY_WRITERS * EVENTS_PER_WRITER


@contextmanager
def durable_cluster() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL with its durability on (fsync, synchronous commit): the throwaway test
    cluster trades those for speed, which would make a crash lose acknowledged commits."""
    root = Path(tempfile.mkdtemp(prefix="pgcontroller-durable-", dir="/tmp"))
    os.chmod(root, 0o755)
    cluster = EmbeddedPostgres(root / "data")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def crash(cluster: EmbeddedPostgres, timeout_s: float = 30) -> None:
    """Immediate shutdown (SIGQUIT to the postmaster): every backend exits without a checkpoint,
    and recovery at the next start replays the WAL only."""
    pid = int((cluster.pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "PostgreSQL did not exit after SIGQUIT"
        time.sleep(0.05)


async def _until_controller_answers(controller: Controller, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await controller.stub.checkScopeExists(pb.ScopeInfo(scope="pg"))
            return
        except (GRPCError, OSError, ConnectionError):
            assert time.monotonic() < deadline, "the controller never answered after the restart"
            await asyncio.sleep(0.2)


async def test_events_acknowledged_before_a_postgres_crash_are_there_after_it(tmp_path: Path) -> None:
    with durable_cluster() as cluster:
        url = cluster.url()
        await asyncio.to_thread(upgrade_to_head, url)
        served = await start_with_segment_store(tmp_path, "--db-url", url)
        try:
            controller = Controller(served)
            try:
                info = await controller.create_stream("pg", "s", 2)
                before = await ClientProcess.start(
                    "write", tmp_path, uri=served.grpc_uri, scope="pg", stream="s", count=5000, keys=8,
                    inflight=500, progress_every=1000, prefix="b",
                )  # fmt: skip
                # RESULT comes after the last flush: every one of these events was acknowledged.
                assert (await before.result(120))["written"] == 5000
                await asyncio.to_thread(crash, cluster)
                await asyncio.to_thread(cluster.start)
                await _until_controller_answers(controller)
                # The store writes again once the database is back, on new connections.
                after = await ClientProcess.start(
                    "write", tmp_path, uri=served.grpc_uri, scope="pg", stream="s", count=2000, keys=8,
                    inflight=500, progress_every=1000, prefix="a",
                )  # fmt: skip
                assert (await after.result(180))["written"] == 2000
                await controller.seal(info)
            finally:
                controller.close()
            events = await _read_to_end(served, tmp_path, "pg", 180)
            assert served.process.returncode is None, served.log()
        finally:
            code = await served.stop()
        assert code == 0, served.log()
    check_exactly_once_in_key_order([e for e in events if e[1].startswith("b")], "b", 5000, 8)
    check_exactly_once_in_key_order([e for e in events if e[1].startswith("a")], "a", 2000, 8)
