"""A `serve` process killed with SIGKILL in the middle of a scale (after the new epoch record,
before the old segments are sealed) and restarted completes that scale, with no duplicate
segments and nothing left in the request queue."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import qualified_segment_name, segment_id
from app.testing.scale import scale_request
from app.testing.served import ServedProcess, start_served

S = pb.StreamInfo(scope="crash", stream="s")


async def _wait_for(conn: asyncpg.Connection, sql: str, expected: object, timeout_s: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (value := await conn.fetchval(sql)) != expected:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{sql!r} stayed {value!r}, expected {expected!r}")
        await asyncio.sleep(0.05)


async def _stub_call(served: ServedProcess) -> tuple[Channel, ControllerServiceStub]:
    channel = Channel("127.0.0.1", served.grpc_port)
    return channel, ControllerServiceStub(channel)


async def test_sigkill_mid_scale_then_restart_completes_it(db_url: str, tmp_path: Path) -> None:
    parked = await start_served(
        tmp_path, "--db-url", db_url, env={"PGCONTROLLER_FAILPOINTS": "scale.after_new_epoch"}
    )
    conn = await asyncpg.connect(db_url)
    try:
        channel, stub = await _stub_call(parked)
        try:
            await stub.createScope(pb.ScopeInfo(scope="crash"))
            created = await stub.createStream(
                pb.StreamConfig(streamInfo=S, scalingPolicy=pb.ScalingPolicy(minNumSegments=2))
            )
            assert created.status == pb.CreateStreamStatus.SUCCESS
            started = await stub.scale(scale_request(S, [1], [(0.5, 0.75), (0.75, 1.0)]))
            assert started.status == pb.ScaleResponse.STARTED
        finally:
            channel.close()
        # Parked after writing epoch 1, before sealing: the new segments exist, the old one is open.
        await _wait_for(
            conn, "SELECT count(*) FROM epochs e JOIN streams s ON s.id = e.stream_id WHERE s.name = 's'", 2
        )
        old_segment = qualified_segment_name("crash", "s", 1)
        assert (
            await conn.fetchval("SELECT sealed FROM embedded_segments WHERE name = $1", old_segment) is False
        )
        assert (
            await conn.fetchval(
                "SELECT epoch FROM stream_current_epochs ce JOIN streams s ON s.id = "
                "ce.stream_id WHERE s.name = 's'"
            )
            == 0
        )
        parked.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(parked.process.wait(), 10) == -signal.SIGKILL
        assert await conn.fetchval("SELECT count(*) FROM requests") == 1

        restarted = await start_served(tmp_path, "--db-url", db_url)
        try:
            await _wait_for(conn, "SELECT count(*) FROM requests", 0)
            channel, stub = await _stub_call(restarted)
            try:
                status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=S, epoch=0))
                assert status.status == pb.ScaleStatusResponse.SUCCESS
                current = await stub.getCurrentSegments(S)
                assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in current.segmentRanges] == [
                    (segment_id(0, 0), 0.0, 0.5),
                    (segment_id(2, 1), 0.5, 0.75),
                    (segment_id(3, 1), 0.75, 1.0),
                ]
            finally:
                channel.close()
        finally:
            assert await restarted.stop() == 0, restarted.log()
        assert (
            await conn.fetchval("SELECT sealed FROM embedded_segments WHERE name = $1", old_segment) is True
        )
        # Exactly the segments that should exist, each once: 0, 1 (sealed), 2 and 3 of epoch 1.
        names = await conn.fetch(
            "SELECT name FROM embedded_segments WHERE name LIKE 'crash/s/%' ORDER BY name"
        )
        assert [r["name"] for r in names] == [
            "crash/s/0.#epoch.0",
            "crash/s/1.#epoch.0",
            "crash/s/2.#epoch.1",
            "crash/s/3.#epoch.1",
        ]
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM segments g JOIN streams s ON s.id = g.stream_id WHERE s.name = 's'"
            )
            == 4
        )
        assert (
            await conn.fetchval(
                "SELECT state FROM stream_states st JOIN streams s ON s.id = st.stream_id WHERE s.name = 's'"
            )
            == "ACTIVE"
        )
        assert (
            await conn.fetchval(
                "SELECT active_epoch FROM stream_epoch_transitions x JOIN streams s ON s.id = x.stream_id "
                "WHERE s.name = 's'"
            )
            == -1
        )
    finally:
        await conn.close()
