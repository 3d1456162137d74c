"""Issue 32 item 4 on the gRPC port and the segment store's port: a flood of idle connections under
a low RLIMIT_NOFILE leaves the process the descriptors it keeps in reserve (--fd-reserve), so its
database sessions can reconnect when the database drops them during the flood (readiness,
leadership and buckets come back), and a legitimate client connected before the attack keeps its
answers. The gRPC port also holds at most --grpc-max-connections: one more is told GOAWAY and
closed at once, logged once per interval."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess, start_served
from tests.segmentstore.server_harness import Client, event, wid
from tests.support.hostile import client_once_served, p99, rss_kb, until_leader_and_ready

pytestmark = pytest.mark.timeout(120)

# Below the store port's own cap (1000), as a host's default 1024 is once the process holds a few
# dozen descriptors of its own: the cap alone would let the flood take them all.
NOFILE = 1000
FD_RESERVE = 128
FLOOD = 1100
FLOOD_WAVE = 50
# The 1 s, with a margin for this loaded 2-core machine (the flood's connects and the
# server's accepts share its two cores with the probe).
PROBE_P99_BOUND_S = 1.5
PROBE_CALL_TIMEOUT_S = 10.0
PROBE_S = 3.0
RSS_BOUND_KB = 100 * 1024
# Reconnecting every session (pool, lock, listener, probe) and claiming the buckets again.
RECOVERY_S = 30.0
SEGMENT = "hostile/fd/0.#epoch.0"
SETTINGS_FRAME, GOAWAY_FRAME, ENHANCE_YOUR_CALM = 0x4, 0x7, 0xB


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.asynccontextmanager
async def _serve(tmp_path: Path, db_url: str, *flags: str) -> AsyncIterator[ServedProcess]:
    served = await start_served(
        tmp_path,
        "--db-url",
        db_url,
        "--container-rebalance-delay-s",
        "0",
        "--fd-reserve",
        str(FD_RESERVE),
        # The store's own deadlines would close the flood's silent connections: kept past the test.
        *("--segment-store-hello-timeout-s", "600", "--segment-store-idle-timeout-s", "600"),
        *flags,
        nofile=NOFILE,
    )
    try:
        yield served
    finally:
        code = await served.stop()
        assert code == 0, f"exit {code}; the log ends:\n" + served.log()[-4000:]


class _GrpcProbe:
    """A legitimate gRPC client on a connection made before the attack: each call writes a scope
    (the pool's work, not a cache's)."""

    def __init__(self, port: int, name: str = "probe") -> None:
        self._channel = Channel("127.0.0.1", port)
        self._stub = ControllerServiceStub(self._channel)
        self._names = (f"{name}{n}" for n in itertools.count())

    async def call(self) -> None:
        reply = await self._stub.createScope(
            pb.ScopeInfo(scope=next(self._names)), timeout=PROBE_CALL_TIMEOUT_S
        )
        assert reply.status == pb.CreateScopeStatus.SUCCESS, reply

    def close(self) -> None:
        self._channel.close()


class _StoreProbe:
    """A legitimate writer on the store port, connected before the attack: one acknowledged
    append at a time."""

    def __init__(self, client: Client, writer_id: int) -> None:
        self._client = client
        self._writer_id = writer_id
        self._event_number = 0

    @classmethod
    async def start(cls, port: int) -> _StoreProbe:
        client = await client_once_served(("127.0.0.1", port), SEGMENT)
        probe = cls(client, wid())
        await client.setup(SEGMENT, writer_id=probe._writer_id)
        return probe

    async def call(self) -> None:
        self._event_number += 1
        reply = await self._client.append(self._writer_id, event(b"probe"), self._event_number)
        assert isinstance(reply, wc.DataAppended), reply

    def close(self) -> None:
        self._client.writer.close()


async def _open_idle(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    # Past the listener's backlog a connect may wait: each is given a moment.
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(5.0):
            return await asyncio.open_connection("127.0.0.1", port)
    return None


async def _flood(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """In waves below the listener's backlog: a burst past it leaves connects the client counts
    open but the server never accepts (their handshakes wait in SYN-RECV), so it would not reach
    the descriptor limit at all."""
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for wave in range(0, count, FLOOD_WAVE):
        batch = await asyncio.gather(*(_open_idle(port) for _ in range(min(FLOOD_WAVE, count - wave))))
        opened.extend(c for c in batch if c is not None)
    return opened


async def _close(connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _, writer in connections:
        writer.close()
    for _, writer in connections:
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _latencies(call: Callable[[], Awaitable[None]], seconds: float) -> list[float]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        await call()
        latencies.append(time.monotonic() - started)
        await asyncio.sleep(0.05)
    return latencies


async def _until_answered(call: Callable[[], Awaitable[None]], timeout_s: float) -> None:
    """The probe's next call succeeds (the ones in flight when the database cut its sessions may
    fail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await call()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _drop_database_sessions(db_url: str) -> int:
    """Terminates every session of serve's database (a restart of the database, as its clients see
    it): the pool, the lock session, the listener and the readiness probe must all reconnect."""
    admin = await asyncpg.connect(db_url)
    try:
        return int(
            await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await admin.close()


@pytest.mark.parametrize("port_name", ["grpc", "segment-store"])
async def test_a_flood_of_idle_connections_under_a_low_nofile_leaves_the_database_sessions_room(
    db_url: str, tmp_path: Path, port_name: str
) -> None:
    async with _serve(tmp_path, db_url) as served, aiohttp.ClientSession() as http:
        # The REST client's keep-alive connection, the probe's and the database sessions all
        # predate the flood.
        before = await until_leader_and_ready(http, served, 30)
        probe: _GrpcProbe | _StoreProbe
        if port_name == "grpc":
            port, probe = served.grpc_port, _GrpcProbe(served.grpc_port)
        else:
            assert served.segment_store_port is not None
            port, probe = served.segment_store_port, await _StoreProbe.start(served.segment_store_port)
        try:
            await probe.call()
            pid = served.process.pid
            rss_before, descriptors_before = rss_kb(pid), _descriptors(pid)
            opened = await _flood(port, FLOOD)
            try:
                assert _descriptors(pid) > descriptors_before + FLOOD // 2, "the flood missed"
                latencies = await _latencies(probe.call, PROBE_S)
                held = _descriptors(pid)
                assert held <= NOFILE - FD_RESERVE // 2, f"{held} descriptors of {NOFILE} taken"
                dropped = await _drop_database_sessions(db_url)
                assert dropped >= 3, dropped
                after = await until_leader_and_ready(http, served, RECOVERY_S)
                await _until_answered(probe.call, RECOVERY_S)
                rss_during = rss_kb(pid)
            finally:
                await _close(opened)
        finally:
            probe.close()
    assert after["owned"] == before["owned"], (before, after)
    assert p99(latencies) < PROBE_P99_BOUND_S, sorted(latencies)[-5:]
    assert rss_during - rss_before < RSS_BOUND_KB, (rss_before, rss_during)
    log = served.log()
    assert "out of system resource" not in log and "Too many open files" not in log, log[-4000:]
    assert 1 <= len([line for line in log.splitlines() if "connection refused" in line]) <= 6


async def _goaway_then_closed(reader: asyncio.StreamReader, timeout_s: float) -> int | None:
    """The GOAWAY error code the server sent before closing, or None if it did not close within
    `timeout_s` (or closed without a GOAWAY: -1)."""
    try:
        async with asyncio.timeout(timeout_s):
            data = await reader.read()
    except TimeoutError:
        return None
    except ConnectionError:
        return -1
    while len(data) >= 9:
        length, kind = int.from_bytes(data[:3], "big"), data[3]
        if kind == GOAWAY_FRAME:
            return int(struct.unpack("!I", data[13:17])[0])
        data = data[9 + length :]
    return -1


async def test_a_grpc_port_past_its_cap_says_goaway_at_once_with_one_log_line_per_interval(
    db_url: str, tmp_path: Path
) -> None:
    cap = 50
    async with _serve(tmp_path, db_url, "--grpc-max-connections", str(cap)) as served:
        probe = _GrpcProbe(served.grpc_port)
        try:
            await probe.call()  # the probe holds one of the cap's places
            opened = await _flood(served.grpc_port, 3 * cap)
            try:
                answers = await asyncio.gather(*(_goaway_then_closed(r, 2.0) for r, _ in opened))
                refused = [a for a in answers if a is not None]
                assert len(refused) >= 3 * cap - cap, f"{len(refused)} of {3 * cap} refused at once"
                assert set(refused) == {ENHANCE_YOUR_CALM}, answers
                latencies = await _latencies(probe.call, PROBE_S)
            finally:
                await _close(opened)
            # The places of the closed connections are free again.
            late = _GrpcProbe(served.grpc_port, "late")
            try:
                await _until_answered(late.call, 10)
            finally:
                late.close()
        finally:
            probe.close()
    assert p99(latencies) < PROBE_P99_BOUND_S, sorted(latencies)[-5:]
    log = served.log()
    lines = [line for line in log.splitlines() if "connection refused" in line]
    assert 1 <= len(lines) <= 3, lines
    assert "Traceback" not in log, log[log.index("Traceback") - 200 :][:4000]
