"""Issue 32, item 3: the embedded PostgreSQL is supervised. A `serve` (and a `serve --processes 2`
supervisor) that started it restarts a postmaster killed under it, with the same port, and logs the
crash recovery; liveness stays true meanwhile, calls made during the outage end rather than hang,
and a write succeeds once it is back. One it cannot bring back ends serve with exit 1. A `serve`
killed with its database running leaves that database to the next `serve`, which adopts it and
stops it on a clean exit: no postmaster outlives them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import shutil
import signal
import time
from collections.abc import Iterator

import aiohttp
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.clock import SystemClock
from app.embedded_pg import EmbeddedPostgres
from app.segmentstore.wire import commands as wc
from app.services.health import HealthService, HealthStatus
from app.testing.served import ServedProcess, start_served
from app.wiring.embedded_db import EMBEDDED_DATABASE, EmbeddedDatabaseLost, Report, keep_database
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.scratch import scratch_dir

# From the SIGKILL to a new postmaster accepting connections: the check interval, the killed
# server's children exiting, crash recovery (durable settings) and the start; generous for a
# loaded 2-core machine, a hang is what it catches.
BACK_WITHIN_S = 30.0
# A call made while the database is down must end (an error the client retries, or success once
# it is back), never wait for an operator.
CALL_ENDS_WITHIN_S = 15.0
# From serve's SIGKILL to its database stopped: the guard's wake-up and a fast shutdown.
STOPPED_WITHIN_S = 30.0


@pytest.fixture
def data_dir() -> Iterator[pathlib.Path]:
    # Searchable: as root the server runs as `nobody`, which must reach the cluster (pytest's
    # tmp_path sits in a 0700 directory, which would send the cluster to /var/lib).
    root = scratch_dir("pgc-hostile-db-")
    try:
        yield root / "data"
    finally:
        _kill_leftovers(EmbeddedPostgres(root / "data"))
        shutil.rmtree(root, ignore_errors=True)


def _kill_leftovers(embedded: EmbeddedPostgres) -> None:
    for pid in _postgres_processes(embedded):
        os.kill(pid, signal.SIGKILL)


def _guards(data_dir: pathlib.Path) -> list[int]:
    """The live guard processes of the cluster under `data_dir` (app/embedded_pg.py `guard`)."""
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = pathlib.Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pgcontroller-db-guard" in argv and any(str(data_dir).encode() in arg for arg in argv):
            found.append(int(entry.name))
    return found


def _postmaster(embedded: EmbeddedPostgres) -> tuple[int, int] | None:
    """The live postmaster's pid and port, from its pid file; None when none runs."""
    try:
        lines = (embedded.pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, IndexError, ValueError):
        return None
    return (pid, port) if pid in _postgres_processes(embedded) else None


def _postgres_processes(embedded: EmbeddedPostgres) -> list[int]:
    """Every live postgres process working in the cluster (the postmaster and its children)."""
    real = os.path.realpath(embedded.pgdata)
    found: list[int] = []
    if not os.path.isdir(real):
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{entry.name}/exe")
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
            state = pathlib.Path(f"/proc/{entry.name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if os.path.basename(exe).startswith("postgres") and cwd == real and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


_SCOPE, _STREAM = "kept", "appends"
_SEGMENT = f"{_SCOPE}/{_STREAM}/0.#epoch.0"


async def _create_stream(stub: ControllerServiceStub) -> None:
    await _create_scope(stub, _SCOPE)
    config = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=_SCOPE, stream=_STREAM),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
    )
    assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS


async def _set_up_writer(store: tuple[str, int]) -> tuple[Client, int]:
    writer_id = wid()
    client, _last = await _set_up_again(store, writer_id)
    return client, writer_id


async def _set_up_again(store: tuple[str, int], writer_id: int) -> tuple[Client, int]:
    """A connection with `writer_id` set up on the segment once the store serves it, and the
    writer's last event number the store holds."""
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            client = await Client.connect(store)
            reply = await client.call(wc.SetupAppend(rid(), writer_id, _SEGMENT, ""))
            if isinstance(reply, wc.AppendSetup):
                return client, reply.last_event_number
            await client.close()
        assert time.monotonic() < deadline, "the store never set the writer up again"
        await asyncio.sleep(0.2)


async def _append(client: Client, writer_id: int, number: int) -> bytes | None:
    """Event `number`'s bytes if the store acknowledged it; None if it closed the connection."""
    data = event(f"event {number}|".encode() + os.urandom(1000))
    try:
        reply = await asyncio.wait_for(client.append(writer_id, data, number), CALL_ENDS_WITHIN_S)
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    assert isinstance(reply, wc.DataAppended), reply
    return data


async def _liveness(http: aiohttp.ClientSession, served: ServedProcess) -> int:
    async with http.get(f"{served.rest_base}/v1/health/liveness?strict=true") as response:
        return response.status


async def _create_scope(stub: ControllerServiceStub, name: str) -> None:
    reply = await stub.createScope(pb.ScopeInfo(scope=name), timeout=CALL_ENDS_WITHIN_S)
    assert reply.status in (pb.CreateScopeStatus.SUCCESS, pb.CreateScopeStatus.SCOPE_EXISTS)


async def _until_created(stub: ControllerServiceStub, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await _create_scope(stub, name)
            return
        except GRPCError as exc:
            assert exc.status is Status.UNAVAILABLE, exc
            assert time.monotonic() < deadline, f"createScope still failing after {timeout_s} s: {exc}"
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("processes", [1, 2])
async def test_a_killed_postmaster_is_restarted_and_writes_succeed_again(
    data_dir: pathlib.Path, processes: int
) -> None:
    embedded = EmbeddedPostgres(data_dir)
    served = await start_served(data_dir.parent, "--data-dir", str(data_dir), "--processes", str(processes))
    try:
        channel = Channel("127.0.0.1", served.grpc_port)
        stub = ControllerServiceStub(channel)
        try:
            async with aiohttp.ClientSession() as http:
                await _until_created(stub, "before", timeout_s=30)
                assert served.segment_store_port is not None
                store = ("127.0.0.1", served.segment_store_port)
                await _create_stream(stub)
                appender, writer_id = await _set_up_writer(store)
                acknowledged = await _append(appender, writer_id, 1)
                assert acknowledged is not None
                before = _postmaster(embedded)
                assert before is not None
                killed, port = before

                os.kill(killed, signal.SIGKILL)
                # A write made during the outage ends: with an error the client retries, or done.
                during = asyncio.create_task(_create_scope(stub, "during"))
                # So does an append in flight: acknowledged, or its connection closed for the
                # writer to set up again and resend.
                started = time.monotonic()
                in_flight = await _append(appender, writer_id, 2)
                assert time.monotonic() - started < CALL_ENDS_WITHIN_S
                await appender.close()
                deadline = time.monotonic() + BACK_WITHIN_S
                while (
                    (back := _postmaster(embedded)) is None or back[0] == killed or not embedded.is_running()
                ):
                    assert time.monotonic() < deadline, (
                        "the embedded PostgreSQL was not restarted:\n" + (served.log()[-4000:])
                    )
                    # Liveness: the process is not dead, its database is being brought back.
                    assert await _liveness(http, served) == 200
                    await asyncio.sleep(0.1)
                # Same port: the URL every process of the run holds still reaches it.
                assert back[1] == port

                try:
                    await asyncio.wait_for(during, CALL_ENDS_WITHIN_S + 5)
                except GRPCError as exc:
                    assert exc.status is Status.UNAVAILABLE, exc
                await _until_created(stub, "after", timeout_s=30)
                assert await _liveness(http, served) == 200
                # Nothing acknowledged lost, nothing half-written: the store holds event 2 exactly
                # when it acknowledged it, and a resend after setting up again is stored once.
                appender, last = await _set_up_again(store, writer_id)
                assert last == (2 if in_flight is not None else 1), (last, in_flight)
                if in_flight is None:
                    in_flight = await _append(appender, writer_id, 2)
                    assert in_flight is not None
                stored = await appender.read(_SEGMENT, 0)
                assert isinstance(stored, wc.SegmentRead) and stored.data == acknowledged + in_flight, stored
                await appender.close()
        finally:
            channel.close()
        # Logged once the restart has also checked the service's role and database, a moment after
        # the server first accepts connections.
        deadline = time.monotonic() + 10
        while "the embedded PostgreSQL is back" not in (log := served.log()):
            assert time.monotonic() < deadline, log[-4000:]
            await asyncio.sleep(0.05)
        assert "the embedded PostgreSQL (port" in log and "has died; restarting it" in log, log[-4000:]
        # PostgreSQL's own account of its crash recovery, repeated in ours.
        assert "embedded PostgreSQL: " in log and "not properly shut down" in log, log[-4000:]
        assert served.process.returncode is None, log[-4000:]
    finally:
        code = await served.stop()
    assert code == 0, served.log()[-4000:]
    assert _postgres_processes(embedded) == [], "the database outlived the serve that owned it"


async def test_a_database_that_cannot_come_back_ends_serve_with_exit_1(data_dir: pathlib.Path) -> None:
    embedded = EmbeddedPostgres(data_dir)
    served = await start_served(
        data_dir.parent, "--data-dir", str(data_dir), "--embedded-db-restart-attempts", "2"
    )
    try:
        running = _postmaster(embedded)
        assert running is not None
        # The running server never reads its configuration again; a new one refuses to start.
        with (embedded.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\nthis line = = is not a setting\n")
        os.kill(running[0], signal.SIGKILL)
        code = await asyncio.wait_for(served.process.wait(), timeout=BACK_WITHIN_S)
    finally:
        await served.stop()
    log = served.log()
    assert code == 1, log[-4000:]
    assert "restart 1 of 2 of the embedded PostgreSQL failed" in log, log[-4000:]
    assert "could not be restarted in 2 attempts" in log, log[-4000:]


@pytest.mark.parametrize("processes", [1, 2])
async def test_a_killed_serve_leaves_no_postmaster(data_dir: pathlib.Path, processes: int) -> None:
    # SIGKILL runs nothing on the way out: the guard serve started beside its database sees the
    # pipe only serve held close, and stops the database.
    embedded = EmbeddedPostgres(data_dir)
    served = await start_served(data_dir.parent, "--data-dir", str(data_dir), "--processes", str(processes))
    assert _postmaster(embedded) is not None
    served.process.kill()
    await served.process.wait()
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while (left := _postgres_processes(embedded)) != []:
        assert time.monotonic() < deadline, f"postgres processes {left} outlived the killed serve"
        await asyncio.sleep(0.1)
    assert _guards(data_dir) == []

    # Stopped cleanly (fast mode): the next serve starts on it without crash recovery.
    second = await start_served(data_dir.parent, "--data-dir", str(data_dir))
    code = await second.stop()
    assert code == 0, second.log()[-4000:]
    assert "adopting the embedded PostgreSQL" not in second.log()
    assert _postgres_processes(embedded) == []


async def test_a_serve_killed_with_its_guard_leaves_its_database_to_the_next_one_which_stops_it(
    data_dir: pathlib.Path,
) -> None:
    embedded = EmbeddedPostgres(data_dir)
    first = await start_served(data_dir.parent, "--data-dir", str(data_dir))
    postmaster = _postmaster(embedded)
    assert postmaster is not None
    guards = _guards(data_dir)
    assert len(guards) == 1, guards
    os.kill(guards[0], signal.SIGKILL)
    first.process.kill()
    await first.process.wait()
    # Nothing ran on the way out of either SIGKILL: the database is still up, and still the dead serve's.
    assert _postmaster(embedded) == postmaster

    second = await start_served(data_dir.parent, "--data-dir", str(data_dir))
    try:
        assert _postmaster(embedded) == postmaster, "the running database was not reused"
    finally:
        code = await second.stop()
    log = second.log()
    assert code == 0, log[-4000:]
    assert _postgres_processes(embedded) == [], (
        "a postmaster outlived every serve that used it:\n" + log[-4000:]
    )
    assert "adopting the embedded PostgreSQL" in log, log[-4000:]


async def test_liveness_turns_false_when_the_keeper_gives_up(data_dir: pathlib.Path) -> None:
    # The keeper alone, on a real server: serve's exit (above) follows from the keeper's end; this
    # holds the verdict an orchestrator reads in between, which serve's exit makes too brief to poll.
    embedded = EmbeddedPostgres(data_dir, fast=True)
    assert await asyncio.to_thread(embedded.start, owned=True)
    health = HealthService(SystemClock())
    try:
        keeper = asyncio.create_task(
            keep_database(embedded, embedded.port(), 1, logging.getLogger("test"), _reporter(health))
        )
        running = _postmaster(embedded)
        assert running is not None
        await asyncio.sleep(0.3)
        assert health.alive and health.find(EMBEDDED_DATABASE) is not None
        with (embedded.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\nthis line = = is not a setting\n")
        os.kill(running[0], signal.SIGKILL)
        with pytest.raises(EmbeddedDatabaseLost):
            await asyncio.wait_for(keeper, BACK_WITHIN_S)
        assert not health.alive
    finally:
        await asyncio.to_thread(embedded.stop)


def _reporter(health: HealthService) -> Report:
    def report(status: HealthStatus, details: dict[str, str]) -> None:
        health.set(EMBEDDED_DATABASE, status, **details)

    return report
