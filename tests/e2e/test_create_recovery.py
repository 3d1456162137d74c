"""Issue 16 defect 8 with real `serve` processes: a process killed with SIGKILL in the middle of a
createStream leaves a stream the next process finishes by itself, and processes started together
on a fresh database all come up (one migrates, the others wait)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.store import migrate
from app.testing.served import ServedProcess, start_served
from tests.support.db import with_database

S = pb.StreamInfo(scope="killed", stream="s")

STATE_SQL = (
    "SELECT st.state FROM streams s JOIN stream_states st ON st.stream_id = s.id "
    "WHERE s.scope = $1 AND s.name = $2"
)


async def _value_becomes(
    conn: asyncpg.Connection, sql: str, args: tuple[object, ...], expected: object, timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while (value := await conn.fetchval(sql, *args)) != expected:
        assert time.monotonic() < deadline, f"{sql!r} stayed {value!r}, expected {expected!r}"
        await asyncio.sleep(0.05)


async def test_defect_8_sigkill_mid_create_the_next_process_finishes_the_stream(
    db_url: str, tmp_path: Path
) -> None:
    first = await start_served(tmp_path, "--db-url", db_url)
    conn = await asyncpg.connect(db_url)
    blocker = await asyncpg.connect(db_url)
    try:
        channel = Channel("127.0.0.1", first.grpc_port)
        try:
            stub = ControllerServiceStub(channel)
            assert (
                await stub.createScope(pb.ScopeInfo(scope="killed"))
            ).status == pb.CreateScopeStatus.SUCCESS
            # Segment creation waits on this lock: the create is caught after its first write.
            await blocker.execute("BEGIN")
            await blocker.execute("LOCK TABLE embedded_segments IN SHARE ROW EXCLUSIVE MODE")
            call = asyncio.create_task(
                stub.createStream(
                    pb.StreamConfig(streamInfo=S, scalingPolicy=pb.ScalingPolicy(minNumSegments=3))
                )
            )
            await _value_becomes(conn, STATE_SQL, ("killed", "s"), "CREATING")
            first.process.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(first.process.wait(), 10) == -signal.SIGKILL
            with contextlib.suppress(Exception):
                await call  # the connection died with the process
        finally:
            channel.close()
        await blocker.execute("ROLLBACK")
        assert await conn.fetchval(STATE_SQL, "killed", "s") == "CREATING"

        # Nobody repeats the create: the next process finishes it on its own.
        second = await start_served(tmp_path, "--db-url", db_url, "--create-takeover-s", "0.5")
        try:
            await _value_becomes(conn, STATE_SQL, ("killed", "s"), "ACTIVE")
            await _value_becomes(conn, STATE_SQL, ("killed", "_MARKs"), "ACTIVE")
            await _value_becomes(conn, "SELECT count(*) FROM requests", (), 0)
            channel = Channel("127.0.0.1", second.grpc_port)
            try:
                current = await ControllerServiceStub(channel).getCurrentSegments(S)
                assert len(current.segmentRanges) == 3
            finally:
                channel.close()
        finally:
            assert await second.stop() == 0, second.log()
        names = await conn.fetch(
            "SELECT name FROM embedded_segments WHERE name LIKE 'killed/%' ORDER BY name"
        )
        assert [r["name"] for r in names] == [
            "killed/_MARKs/0.#epoch.0",
            "killed/s/0.#epoch.0",
            "killed/s/1.#epoch.0",
            "killed/s/2.#epoch.0",
        ]
    finally:
        if first.process.returncode is None:
            first.process.kill()
            await first.process.wait()
        await blocker.close()
        await conn.close()


@pytest.fixture
async def fresh_db_url(pg_admin_url: str) -> AsyncIterator[str]:
    """A database with nothing in it, not even the migrations."""
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    finally:
        await admin.close()
    try:
        yield with_database(pg_admin_url, name)
    finally:
        admin = await asyncpg.connect(pg_admin_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


async def test_defect_8_serve_processes_started_together_on_a_fresh_database_all_come_up(
    fresh_db_url: str, tmp_path: Path
) -> None:
    dirs = [tmp_path / f"p{i}" for i in range(3)]
    for work_dir in dirs:
        work_dir.mkdir()
    started = await asyncio.gather(
        *(start_served(work_dir, "--db-url", fresh_db_url) for work_dir in dirs), return_exceptions=True
    )
    processes = [p for p in started if isinstance(p, ServedProcess)]
    try:
        failures = [p for p in started if not isinstance(p, ServedProcess)]
        assert failures == [], failures
        conn = await asyncpg.connect(fresh_db_url)
        try:
            assert await migrate.current_revision(conn) == migrate.head_revision()
        finally:
            await conn.close()
        for process in processes:
            channel = Channel("127.0.0.1", process.grpc_port)
            try:
                answer = await ControllerServiceStub(channel).checkScopeExists(pb.ScopeInfo(scope="none"))
                assert not answer.exists
            finally:
                channel.close()
    finally:
        codes = await asyncio.gather(*(p.stop() for p in processes))
        assert codes == [0] * len(processes), [p.log() for p in processes]
