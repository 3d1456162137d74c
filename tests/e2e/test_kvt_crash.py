"""A `serve` process killed with SIGKILL in the middle of a key-value table request (after the
first table segment was created, or deleted) and restarted finishes that request: every table
segment exists exactly once and the table is ACTIVE, or nothing of the table is left.

These need the table handlers and RPCs wired into `serve` (app/main.py)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import segment_id
from app.testing.served import ServedProcess, start_served

SC = "kvcrash"
PARTITIONS = 4
CONFIG = pb.KeyValueTableConfig(
    scope=SC,
    kvtName="t",
    partitionCount=PARTITIONS,
    primaryKeyLength=8,
    secondaryKeyLength=8,
    rolloverSizeBytes=0,
)
INFO = pb.KeyValueTableInfo(scope=SC, kvtName="t")
SEGMENTS = [f"{SC}/t_kvtable/{n}.#epoch.0" for n in range(PARTITIONS)]
TABLE_SEGMENTS = (
    "SELECT name FROM embedded_segments WHERE kind = 'table' AND name LIKE 'kvcrash/%' ORDER BY name"
)


async def _wait_until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _segment_names(conn: asyncpg.Connection) -> list[str]:
    return [r["name"] for r in await conn.fetch(TABLE_SEGMENTS)]


async def _kill_while(
    parked: ServedProcess, conn: asyncpg.Connection, call: Callable[[ControllerServiceStub], Any]
) -> None:
    """Starts `call` against the parked process (its answer never comes) and, once the request
    parked after its first table segment, kills the process."""
    channel = Channel("127.0.0.1", parked.grpc_port)
    try:
        pending = asyncio.create_task(call(ControllerServiceStub(channel)))
        expected = 1 if call is _create else PARTITIONS - 1
        await _wait_until(
            lambda: _count_is(conn, expected), f"{expected} table segment(s) while parked", timeout_s=20
        )
        await asyncio.sleep(0.2)  # parked: nothing more happens
        assert len(await _segment_names(conn)) == expected
        parked.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(parked.process.wait(), 10) == -signal.SIGKILL
        pending.cancel()
        with contextlib.suppress(BaseException):
            await pending
    finally:
        channel.close()


async def _count_is(conn: asyncpg.Connection, expected: int) -> bool:
    return len(await _segment_names(conn)) == expected


async def _create(stub: ControllerServiceStub) -> Any:
    return await stub.createKeyValueTable(CONFIG)


async def _delete(stub: ControllerServiceStub) -> Any:
    return await stub.deleteKeyValueTable(INFO)


async def _restart_and_drain(tmp_path: Path, db_url: str, conn: asyncpg.Connection) -> ServedProcess:
    restarted = await start_served(tmp_path, "--db-url", db_url)

    async def drained() -> bool:
        return await conn.fetchval("SELECT count(*) FROM requests") == 0

    await _wait_until(drained, "the request queue to drain after the restart")
    return restarted


async def test_sigkill_mid_kvt_create_then_restart_completes_it(db_url: str, tmp_path: Path) -> None:
    parked = await start_served(
        tmp_path, "--db-url", db_url, env={"PGCONTROLLER_FAILPOINTS": "kvt_create.after_first_segment"}
    )
    conn = await asyncpg.connect(db_url)
    try:
        channel = Channel("127.0.0.1", parked.grpc_port)
        try:
            await ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope=SC))
        finally:
            channel.close()
        await _kill_while(parked, conn, _create)
        assert await conn.fetchval("SELECT state FROM kvtables WHERE name = 't'") == "CREATING"
        assert await conn.fetchval("SELECT kind FROM requests") == "create_kvt"

        restarted = await _restart_and_drain(tmp_path, db_url, conn)
        try:
            channel = Channel("127.0.0.1", restarted.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                current = await stub.getCurrentSegmentsKeyValueTable(INFO)
                assert [r.segmentId.segmentId for r in current.segmentRanges] == [
                    segment_id(n, 0) for n in range(PARTITIONS)
                ]
                again = await stub.createKeyValueTable(CONFIG)
                assert again.status == pb.CreateKeyValueTableStatus.TABLE_EXISTS
            finally:
                channel.close()
        finally:
            assert await restarted.stop() == 0, restarted.log()
        assert await conn.fetchval("SELECT state FROM kvtables WHERE name = 't'") == "ACTIVE"
        assert await _segment_names(conn) == SEGMENTS  # each exactly once (names are the key)
    finally:
        await conn.close()


async def test_sigkill_mid_kvt_delete_then_restart_completes_it(db_url: str, tmp_path: Path) -> None:
    parked = await start_served(
        tmp_path, "--db-url", db_url, env={"PGCONTROLLER_FAILPOINTS": "kvt_delete.after_first_segment"}
    )
    conn = await asyncpg.connect(db_url)
    try:
        channel = Channel("127.0.0.1", parked.grpc_port)
        try:
            stub = ControllerServiceStub(channel)
            await stub.createScope(pb.ScopeInfo(scope=SC))
            created = await stub.createKeyValueTable(CONFIG)
            assert created.status == pb.CreateKeyValueTableStatus.SUCCESS
        finally:
            channel.close()
        assert await _segment_names(conn) == SEGMENTS
        await _kill_while(parked, conn, _delete)
        assert await conn.fetchval("SELECT state FROM kvtables WHERE name = 't'") == "DELETING"
        assert await conn.fetchval("SELECT kind FROM requests") == "delete_kvt"

        restarted = await _restart_and_drain(tmp_path, db_url, conn)
        try:
            channel = Channel("127.0.0.1", restarted.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                gone = await stub.getKeyValueTableConfiguration(INFO)
                assert gone.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
                # A new table of the name numbers its segments after the deleted one's.
                recreated = await stub.createKeyValueTable(CONFIG)
                assert recreated.status == pb.CreateKeyValueTableStatus.SUCCESS
                current = await stub.getCurrentSegmentsKeyValueTable(INFO)
                assert [r.segmentId.segmentId for r in current.segmentRanges] == [
                    segment_id(n, 0) for n in range(PARTITIONS, 2 * PARTITIONS)
                ]
            finally:
                channel.close()
        finally:
            assert await restarted.stop() == 0, restarted.log()
        assert await _segment_names(conn) == [
            f"{SC}/t_kvtable/{n}.#epoch.0" for n in range(PARTITIONS, 2 * PARTITIONS)
        ]
        assert await conn.fetchval("SELECT last_segment_number FROM deleted_kvtables WHERE name = 't'") == (
            PARTITIONS - 1
        )
    finally:
        await conn.close()
