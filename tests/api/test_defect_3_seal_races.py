"""Issue 16, defect 3: a seal racing an update, truncation or scale wedged the stream (the other
request was postponed forever at the head of the stream's queue, holding the seal back, or
left behind it so the sealed stream could never be deleted).

Each race is made deterministic: both requests are accepted by a controller that runs no
workers, so the other request is queued *before* the seal's; a second controller on the same
database then runs them, over real gRPC against the real services."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import qualified_segment_name
from app.domain.records import StreamState
from app.testing.controller import Services, running_controller
from tests.api.conftest import served
from tests.api.test_grpc_lifecycle import S, scale_request, seg, stream_with, wait_scaled
from tests.api.test_grpc_streams import config, make_scope

T = TypeVar("T")


@asynccontextmanager
async def accepting_only(db_url: str) -> AsyncIterator[tuple[Services, ControllerServiceStub]]:
    """A controller that answers gRPC but runs no workflow: what it accepts stays queued."""
    async with running_controller(db_url, workers=False) as idle, served(idle) as stub:
        yield idle, stub


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def queued(services: Services, kind: str) -> bool:
    return bool(await services.pool.fetchval("SELECT count(*) FROM requests WHERE kind = $1", kind))


async def state(services: Services) -> StreamState:
    return (await services.stream_store.get_state("sc", "s")).value


async def seal_behind(
    db_url: str, idle: Services, stub: ControllerServiceStub, other: Awaitable[T], kind: str
) -> tuple[T, pb.UpdateStreamStatus]:
    """Queues `other` (a request of `kind`), then a seal behind it, then lets workers run both."""
    other_call = asyncio.ensure_future(other)
    await until(lambda: queued(idle, kind))
    seal_call = asyncio.ensure_future(stub.sealStream(S))
    await until(lambda: queued(idle, "seal_stream"))
    assert await state(idle) == StreamState.SEALING
    async with running_controller(db_url):
        other_result, sealed = await asyncio.wait_for(asyncio.gather(other_call, seal_call), 30)
        await until(lambda: nothing_queued(idle))
    return other_result, sealed


async def nothing_queued(services: Services) -> bool:
    return await services.pool.fetchval("SELECT count(*) FROM requests") == 0


async def deleted_cleanly(idle: Services, stub: ControllerServiceStub, db_url: str) -> None:
    async with running_controller(db_url):
        deleted = await asyncio.wait_for(stub.deleteStream(S), 30)
    assert deleted.status == pb.DeleteStreamStatus.SUCCESS
    assert await idle.pool.fetchval("SELECT count(*) FROM streams WHERE name = 's'") == 0
    left = await idle.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE 'sc/s/%'")
    assert left == 0
    assert await nothing_queued(idle)


async def test_defect_3_update_behind_a_seal_ends_with_stream_sealed(db_url: str) -> None:
    async with accepting_only(db_url) as (idle, stub):
        await stream_with(stub, 2)
        updated, sealed = await seal_behind(
            db_url, idle, stub, stub.updateStream(config("sc", "s", 3)), "update_stream"
        )
        assert updated.status == pb.UpdateStreamStatus.STREAM_SEALED
        assert sealed.status == pb.UpdateStreamStatus.SUCCESS
        assert await state(idle) == StreamState.SEALED
        # Unapplied: the stream was sealed with the two segments it had.
        shard = await idle.stream_store.get_sealed_size_shard("sc", "s", 0)
        assert shard is not None and sorted(shard.value) == [seg(0), seg(1)]
        assert not (await idle.stream_store.get_config_record("sc", "s")).value[1]
        await deleted_cleanly(idle, stub, db_url)


async def test_defect_3_scale_behind_a_seal_is_discarded(db_url: str) -> None:
    async with accepting_only(db_url) as (idle, stub):
        await stream_with(stub, 2)
        started = await stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)]))
        assert started.status == pb.ScaleResponse.STARTED
        assert await queued(idle, "scale")
        _none, sealed = await seal_behind(db_url, idle, stub, asyncio.sleep(0), "scale")
        assert sealed.status == pb.UpdateStreamStatus.SUCCESS
        assert await state(idle) == StreamState.SEALED
        assert (await idle.stream_store.get_epoch_transition("sc", "s")).value is None
        # The scale will never complete: checkScale says so instead of IN_PROGRESS forever.
        status = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=S, epoch=0))
        assert status.status == pb.ScaleStatusResponse.INVALID_INPUT
        await deleted_cleanly(idle, stub, db_url)


async def test_defect_3_truncation_behind_a_seal_is_carried_out(db_url: str) -> None:
    async with accepting_only(db_url) as (idle, stub):
        await stream_with(stub, 2)
        async with running_controller(db_url):
            started = await stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)]))
            assert started.status == pb.ScaleResponse.STARTED
            await wait_scaled(stub, 0)
        cut = pb.StreamCut(streamInfo=S, cut={seg(0): 0, seg(2, 1): 0, seg(3, 1): 0})
        truncated, sealed = await seal_behind(db_url, idle, stub, stub.truncateStream(cut), "truncate_stream")
        assert truncated.status == pb.UpdateStreamStatus.SUCCESS
        assert sealed.status == pb.UpdateStreamStatus.SUCCESS
        assert await state(idle) == StreamState.SEALED
        record = (await idle.stream_store.get_truncation("sc", "s")).value
        assert not record.updating and record.deleted_segments == {seg(1)}
        # The segment wholly before the cut is gone from the segment store, as the truncation asked.
        gone = qualified_segment_name("sc", "s", seg(1))
        assert await idle.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name = $1", gone) == 0
        await deleted_cleanly(idle, stub, db_url)


def racing_call(stub: ControllerServiceStub, kind: str, info: pb.StreamInfo) -> Awaitable[object]:
    if kind == "update":
        return stub.updateStream(config(info.scope, info.stream, 3))
    if kind == "truncate":
        return stub.truncateStream(pb.StreamCut(streamInfo=info, cut={seg(0): 0, seg(1): 0}))
    return stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)], info))


@pytest.mark.parametrize("kind", ["update", "truncate", "scale"])
async def test_defect_3_seal_5_ms_after_an_update_truncate_or_scale_leaves_the_stream_deletable(
    services: Services, kind: str
) -> None:
    """The issue's reproduction with the workers running all along: createStream(s, 2), then the
    other call and sealStream 5 ms apart; a few rounds, each on a stream of its own."""
    async with served(services) as stub:
        await make_scope(stub)
        for round_ in range(3):
            info = pb.StreamInfo(scope="sc", stream=f"{kind}{round_}")
            created = await stub.createStream(config("sc", info.stream, 2))
            assert created.status == pb.CreateStreamStatus.SUCCESS
            other = asyncio.ensure_future(racing_call(stub, kind, info))
            await asyncio.sleep(0.005)
            sealed = await asyncio.wait_for(stub.sealStream(info), 30)
            answered = await asyncio.wait_for(other, 30)
            assert sealed.status == pb.UpdateStreamStatus.SUCCESS
            if isinstance(answered, pb.ScaleResponse):
                assert answered.status in (pb.ScaleResponse.STARTED, pb.ScaleResponse.FAILURE)
            else:
                assert isinstance(answered, pb.UpdateStreamStatus)
                assert answered.status in (pb.UpdateStreamStatus.SUCCESS, pb.UpdateStreamStatus.STREAM_SEALED)
            deleted = await asyncio.wait_for(stub.deleteStream(info), 30)
            assert deleted.status == pb.DeleteStreamStatus.SUCCESS
        await until(lambda: nothing_queued(services))
