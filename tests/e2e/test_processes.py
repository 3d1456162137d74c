"""`serve --processes 2` as a real supervisor with two real children on one database: both children
answer on the shared ports (the kernel's own socket table says which process holds a connection),
a change made through one is read through the other, a killed child comes back on the same ports,
SIGTERM stops everything with exit 0, and a child that cannot join stops the run with its code."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess, start_served
from app.wiring.shutdown_watchdog import shutdown_budget_s
from app.wiring.supervisor import PRIVATE_DIR_PREFIX
from tests.support.sockets import established_by_pid

pytestmark = pytest.mark.timeout(300)

INSTANCE = "procs"
MEMBERS = {f"{INSTANCE}-0", f"{INSTANCE}-1"}
# Fresh connections until both children have answered: the kernel hashes each connection's
# addresses to one of the two listeners, so missing one child in 200 tries is a 2^-199 chance.
TRIES = 200
# The default budget (5 s drain + 2 x 5 s) and the supervisor's own reaping.
STOP_BUDGET_S = shutdown_budget_s(5.0, 5.0) + 2.0


async def start_two(db_url: str, work: Path, *args: str) -> ServedProcess:
    return await start_served(work, "--db-url", db_url, "--processes", "2", "--instance-id", INSTANCE, *args)


def ready_info(work: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads((work / "ready.json").read_text())
    return info


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_two(db_url, tmp_path)
    try:
        yield instance
    finally:
        if instance.process.returncode is None:
            assert await instance.stop() == 0, instance.log()


async def self_id(http: aiohttp.ClientSession, served: ServedProcess) -> str:
    async with http.get(f"{served.rest_base}/v1/cluster/self") as response:
        assert response.status == 200, await response.text()
        member: str = (await response.json())["id"]
        return member


async def ids_over_fresh_connections(served: ServedProcess, want: set[str]) -> set[str]:
    """The members that answered, one new connection per request, until `want` all have."""
    seen: set[str] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for _ in range(TRIES):
            seen.add(await self_id(http, served))
            if want <= seen:
                break
    return seen


@asynccontextmanager
async def pinned(served: ServedProcess, member: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A REST session whose one kept-alive connection is held by the child `member`."""
    for _ in range(TRIES):
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        try:
            if await self_id(http, served) != member:
                continue
            yield http
            assert await self_id(http, served) == member, "the pinned connection moved"
            return
        finally:
            await http.close()
    raise AssertionError(f"no connection reached {member} in {TRIES} tries")


async def until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := await check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        await asyncio.sleep(0.05)
    return value


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_both_processes_answer_and_see_each_others_changes(
    served: ServedProcess, tmp_path: Path
) -> None:
    info = ready_info(tmp_path)
    assert info["pid"] == served.process.pid and len(info["processes"]) == 2, info
    children = info["processes"]
    assert await ids_over_fresh_connections(served, MEMBERS) == MEMBERS

    # The cluster view names both children as live members of their own (each registers at its
    # cluster loop's first round, just after it is ready).
    async with aiohttp.ClientSession() as http:

        async def both_live() -> bool:
            async with http.get(f"{served.rest_base}/v1/cluster/members") as response:
                live = {m["id"] for m in (await response.json())["members"] if m["live"]}
            return live == MEMBERS

        await until(both_live, 10, "both children live members")

        # Each child claims request buckets under its own lock session; no bucket has two owners,
        # and one child leads.
        async def buckets_shared() -> bool:
            async with http.get(f"{served.rest_base}/v1/cluster/buckets?service=requests") as response:
                rows = (await response.json())["buckets"]
            owners = [row["owner"] for row in rows]
            assert len({row["bucket"] for row in rows}) == len(rows), rows
            return None not in owners and set(owners) == MEMBERS

        await until(buckets_shared, 30, "both children owning request buckets")
        async with http.get(f"{served.rest_base}/v1/cluster/leader") as response:
            assert (await response.json())["controllerId"] in MEMBERS

    # A stream made through child 0 is read and changed through child 1; each sees the other's change.
    scope, stream = "procs", "s"
    body = {"streamName": stream, "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
    path = f"{served.rest_base}/v1/scopes/{scope}/streams/{stream}"
    async with pinned(served, f"{INSTANCE}-0") as first, pinned(served, f"{INSTANCE}-1") as second:
        async with second.get(path) as response:
            assert response.status == 404  # read first, so child 1 has looked before the create
        async with first.post(f"{served.rest_base}/v1/scopes", json={"scopeName": scope}) as response:
            assert response.status == 201, await response.text()
        async with first.post(f"{served.rest_base}/v1/scopes/{scope}/streams", json=body) as response:
            assert response.status == 201, await response.text()

        async def tags_through(http: aiohttp.ClientSession) -> list[str] | None:
            async with http.get(path) as response:
                if response.status != 200:
                    return None
                tags: list[str] = (await response.json())["tags"]
                return tags

        async def child_1_reads_it() -> bool:
            return await tags_through(second) == []

        await until(child_1_reads_it, 10, "child 1 reading the stream child 0 created")
        update = {**body, "streamTags": ["seen-by-both"]}
        del update["streamName"]
        async with second.put(path, json=update) as response:
            assert response.status == 200, await response.text()

        async def tagged() -> bool:
            return await tags_through(first) == ["seen-by-both"]

        await until(tagged, 10, "child 0 seeing child 1's update")

    # gRPC over many connections: every call answered, and both children hold some of them.
    channels = [Channel("127.0.0.1", served.grpc_port) for _ in range(16)]
    try:
        for channel in channels:
            ranges = await ControllerServiceStub(channel).getCurrentSegments(
                pb.StreamInfo(scope=scope, stream=stream)
            )
            assert len(ranges.segmentRanges) == 2
        held = established_by_pid(children, served.grpc_port)
        assert sum(held.values()) == len(channels) and all(held.values()), held
    finally:
        for channel in channels:
            channel.close()


async def test_a_killed_process_is_restarted_on_the_same_ports_while_the_other_answers(
    served: ServedProcess, tmp_path: Path
) -> None:
    before = ready_info(tmp_path)
    store_child = before["processes"][0]  # child 0: its store is the last to leave the shared address
    os.kill(store_child, signal.SIGKILL)
    reaped = f"controller process 0 (pid {store_child}) exited with -9"

    async def reaped_by_supervisor() -> bool:
        return reaped in served.log()

    # From here its listening socket is gone: the kernel sends every new connection to child 1.
    await until(reaped_by_supervisor, 10, "the supervisor reaping child 0")

    # Every request in the gap is answered, by the child still running.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:

        async def restarted() -> bool:
            async with http.get(f"{served.rest_base}/v1/scopes") as response:
                assert response.status == 200, await response.text()
            now = ready_info(tmp_path)["processes"]
            return now[0] not in (None, store_child)

        await until(restarted, 60, "child 0 restarted")
    after = ready_info(tmp_path)
    assert after["processes"][1] == before["processes"][1]
    assert (after["grpc_port"], after["rest_port"], after["segment_store_port"]) == (
        before["grpc_port"],
        before["rest_port"],
        before["segment_store_port"],
    )
    assert await ids_over_fresh_connections(served, MEMBERS) == MEMBERS
    # The restarted child's segment store listens on the run's port again.
    _, writer = await asyncio.open_connection("127.0.0.1", after["segment_store_port"])
    writer.close()
    await writer.wait_closed()


async def test_sigterm_stops_every_child_and_the_supervisor_exits_0(db_url: str, tmp_path: Path) -> None:
    served = await start_two(db_url, tmp_path)
    children = ready_info(tmp_path)["processes"]
    started = time.monotonic()
    assert await served.stop(STOP_BUDGET_S) == 0, served.log()
    assert time.monotonic() - started < STOP_BUDGET_S
    assert not any(alive(pid) for pid in children)
    assert "shutdown requested: stopping 2 controller processes" in served.log()


async def test_sigusr1_logs_the_tasks_of_the_supervisor_and_a_child_and_both_go_on(
    served: ServedProcess, tmp_path: Path
) -> None:
    """An operator's view of a process that seems stuck: each process it is sent to logs its
    asyncio tasks with the awaits each is suspended in (the default action, exit, never happens)."""
    child = ready_info(tmp_path)["processes"][0]
    for dumps, pid in enumerate((served.process.pid, child), start=1):
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while served.log().count("asyncio tasks:") < dumps:
            assert time.monotonic() < deadline, f"no dump from {pid} within 10 s"
            await asyncio.sleep(0.05)
    text = served.log()
    # The chains reach into the code base: the supervisor waits for its children, a child in
    # its run loop, both down to the line they wait on.
    assert "app/wiring/supervisor.py:" in text and "in run" in text, text[-3000:]
    assert "app/process.py:" in text and "in until_stopped" in text, text[-3000:]
    assert alive(served.process.pid) and alive(child)
    assert await ids_over_fresh_connections(served, MEMBERS) == MEMBERS


def private_dirs_of(supervisor: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{PRIVATE_DIR_PREFIX}{supervisor}-*"))


async def test_children_stop_when_the_supervisor_is_killed(db_url: str, tmp_path: Path) -> None:
    """...and the next supervisor removes the private directory the killed one left."""
    served = await start_two(db_url, tmp_path)
    children = ready_info(tmp_path)["processes"]
    left = private_dirs_of(served.process.pid)
    assert len(left) == 1, left
    served.process.kill()
    await served.process.wait()

    async def all_gone() -> bool:
        return not any(alive(pid) for pid in children)

    await until(all_gone, STOP_BUDGET_S, "the orphaned children stopping")
    # Not asserted still there now: a supervisor another test starts meanwhile may sweep it first.
    (tmp_path / "next").mkdir()
    following = await start_two(db_url, tmp_path / "next")
    try:
        assert private_dirs_of(served.process.pid) == []
    finally:
        assert await following.stop() == 0, following.log()


async def test_a_child_that_cannot_join_stops_the_run_with_its_exit_code(db_url: str, tmp_path: Path) -> None:
    work = tmp_path / "first"
    work.mkdir()
    first = await start_served(work, "--db-url", db_url)
    channel = Channel("127.0.0.1", first.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await stub.createScope(pb.ScopeInfo(scope="fixed"))
        info = pb.StreamInfo(scope="fixed", stream="s")
        config = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=1))
        assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS
    finally:
        channel.close()
    assert await first.stop() == 0, first.log()
    # A stream fixes the cluster's 4 containers: a run asking for 8 is refused by child 0 (exit 2).
    try:
        unexpected = await start_two(db_url, tmp_path, "--container-count", "8")
    except RuntimeError as refused:
        assert "serve exited with 2" in str(refused), refused
        assert "controller process 0 exited with 2 before it was ready" in str(refused)
    else:
        await unexpected.stop()
        raise AssertionError(f"the run started:\n{unexpected.log()}")


async def test_the_supervisor_starts_the_embedded_database_once_and_stops_it_after_its_children(
    tmp_path: Path,
) -> None:
    os.chmod(tmp_path, 0o755)
    data_dir = tmp_path / "data"
    served = await start_served(
        tmp_path, "--data-dir", str(data_dir), "--processes", "2", "--instance-id", INSTANCE
    )
    try:
        scope = {"scopeName": "embedded"}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{served.rest_base}/v1/scopes", json=scope) as response,
        ):
            assert response.status == 201, await response.text()
        assert await ids_over_fresh_connections(served, MEMBERS) == MEMBERS
        # The URL reached the children in their environment, not on their command lines.
        for pid in ready_info(tmp_path)["processes"]:
            argv = command_line(pid)
            assert not any(arg.startswith(b"postgresql://") for arg in argv), argv
    finally:
        assert await served.stop() == 0, served.log()
    # Stopped with the run: a later `db url` finds nothing running.
    gone = await asyncio.to_thread(cli_db_url, data_dir)
    assert gone.returncode == 1 and "no embedded PostgreSQL is running" in gone.stderr, gone.stderr


def command_line(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def cli_db_url(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "db", "url", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
