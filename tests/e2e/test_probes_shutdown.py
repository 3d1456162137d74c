"""SIGTERM on a real `serve`: readiness turns false while the listeners still accept, a gRPC call
in flight finishes within the drain window, then the process exits 0 without a WARNING."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import start_served


async def _readiness(http: aiohttp.ClientSession, base: str) -> tuple[int, object]:
    async with http.get(f"{base}/v1/health/readiness?strict=true") as response:
        return response.status, await response.json()


async def test_sigterm_turns_readiness_false_then_drains_then_exits_quietly(
    db_url: str, tmp_path: Path
) -> None:
    served = await start_served(tmp_path, "--db-url", db_url, "--shutdown-drain-s", "30")
    holder = await asyncpg.connect(db_url)
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 20
            while await _readiness(http, served.rest_base) != (200, True):
                assert time.monotonic() < deadline, served.log()
                await asyncio.sleep(0.1)

            # A slow call: createScope waits on a lock the test holds on the scopes table.
            lock = holder.transaction()
            await lock.start()
            await holder.execute("LOCK TABLE scopes IN SHARE MODE")
            call = asyncio.create_task(
                ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope="drained"))
            )

            async def call_waits_on_the_lock() -> bool:
                waiting = await holder.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE relation = 'scopes'::regclass AND NOT granted"
                )
                return bool(waiting)

            while not await call_waits_on_the_lock():
                assert time.monotonic() < deadline and not call.done(), served.log()
                await asyncio.sleep(0.05)

            served.process.terminate()
            # Readiness turns false while the listeners still accept (the REST answer proves it).
            while await _readiness(http, served.rest_base) != (503, False):
                assert time.monotonic() < deadline, served.log()
                await asyncio.sleep(0.05)
            assert served.process.returncode is None
            assert not call.done()

            await lock.rollback()
            reply = await asyncio.wait_for(call, timeout=10)
            assert reply.status == pb.CreateScopeStatus.SUCCESS
        code = await asyncio.wait_for(served.process.wait(), timeout=15)
        log = served.log()
        assert code == 0, log
        assert "shutdown requested" in log
        assert " WARNING " not in log and " ERROR " not in log, log
    finally:
        channel.close()
        await holder.close()
        if served.process.returncode is None:
            served.process.kill()
            await served.process.wait()
