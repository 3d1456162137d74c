"""Every background loop survives a database restart: after PostgreSQL stops and comes back,
the same `serve` process answers again and its request workers complete new workflows."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from grpclib.client import Channel
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.store.migrate import upgrade_to_head
from app.testing.scale import scale_request
from app.testing.served import start_served
from tests.support.db import throwaway_cluster

S = pb.StreamInfo(scope="rs", stream="s")


async def _until_ok(stub: ControllerServiceStub, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await stub.checkScopeExists(pb.ScopeInfo(scope="rs"))
            return
        except (GRPCError, OSError, ConnectionError):
            assert time.monotonic() < deadline, "the controller never answered after the restart"
            await asyncio.sleep(0.2)


async def test_serve_and_its_workers_survive_a_database_restart(tmp_path: Path) -> None:
    with throwaway_cluster() as cluster:
        url = cluster.url()
        await asyncio.to_thread(upgrade_to_head, url)
        served = await start_served(tmp_path, "--db-url", url)
        try:
            channel = Channel("127.0.0.1", served.grpc_port)
            stub = ControllerServiceStub(channel)
            try:
                await stub.createScope(pb.ScopeInfo(scope="rs"))
                config = pb.StreamConfig(streamInfo=S, scalingPolicy=pb.ScalingPolicy(minNumSegments=1))
                assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS

                await asyncio.to_thread(cluster.stop)
                await asyncio.sleep(1.0)  # every loop notices: LISTEN, lock session, pool, probe
                await asyncio.to_thread(cluster.start)
                await _until_ok(stub)

                # Reads are correct (no stale cache) and a workflow runs end to end again.
                started = await stub.scale(scale_request(S, [0], [(0.0, 0.5), (0.5, 1.0)]))
                assert started.status == pb.ScaleResponse.STARTED
                deadline = time.monotonic() + 30
                while len((await stub.getCurrentSegments(S)).segmentRanges) != 2:
                    assert time.monotonic() < deadline, "the scale never completed after the restart"
                    await asyncio.sleep(0.1)
                assert (await stub.sealStream(S)).status == pb.UpdateStreamStatus.SUCCESS
            finally:
                channel.close()
            assert served.process.returncode is None, served.log()
        finally:
            code = await served.stop()
        assert code == 0, served.log()
