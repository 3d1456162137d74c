"""noteTimestampFromWriter and removeWriter over real gRPC: every status
the proto offers that Pravega answers, and the gRPC errors where Pravega raises one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.watermarks import WatermarkRpcs
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.watermarks import WriterMark
from app.services.watermarks import WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import running_controller
from tests.api.conftest import Served, serve

S = pb.StreamInfo(scope="sc", stream="s")
MISSING = pb.StreamInfo(scope="sc", stream="nosuch")


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Served[PgWatermarkStore]]:
    async with running_controller(db_url, workers=False) as services:
        store = PgWatermarkStore(services.pool)
        rpcs = WatermarkRpcs(WatermarkService(store, services.clock))
        async with serve(services, store, grpc_extensions=[rpcs]) as served:
            await services.scopes.create_scope("sc")
            await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(2)))
            yield served


async def note(
    api: Served[PgWatermarkStore], writer: str, timestamp: int, cut: dict[int, int], info: pb.StreamInfo = S
) -> int:
    request = pb.TimestampFromWriter(
        writer=writer, position=pb.StreamCut(streamInfo=info, cut=cut), timestamp=timestamp
    )
    return (await api.stub.noteTimestampFromWriter(request)).result


async def remove(api: Served[PgWatermarkStore], writer: str, info: pb.StreamInfo = S) -> int:
    return (await api.stub.removeWriter(pb.RemoveWriterRequest(writer=writer, stream=info))).result


async def test_note_timestamp_statuses(api: Served[PgWatermarkStore]) -> None:
    assert await note(api, "w", 100, {0: 10, 1: 20}) == pb.TimestampResponse.SUCCESS
    assert await note(api, "w", 99, {0: 10, 1: 20}) == pb.TimestampResponse.INVALID_TIME
    assert await note(api, "w", 100, {0: 9}) == pb.TimestampResponse.INVALID_POSITION
    assert await note(api, "w", 100, {0: 10, 1: 20}) == pb.TimestampResponse.SUCCESS  # equal is fine
    assert await note(api, "w", 101, {4294967296: 0}) == pb.TimestampResponse.SUCCESS  # disjoint
    assert await note(api, "w2", -5, {}) == pb.TimestampResponse.SUCCESS
    marks = await api.subject.member("sc", "s", 100)
    assert marks is not None
    assert {t.writer: t.mark for t in marks.marks} == {
        "w": WriterMark(101, {4294967296: 0}),
        "w2": WriterMark(-5, {}),
    }


async def test_note_timestamp_errors(api: Served[PgWatermarkStore]) -> None:
    with pytest.raises(GRPCError) as missing:
        await note(api, "w", 1, {0: 1}, MISSING)
    assert missing.value.status is Status.NOT_FOUND
    with pytest.raises(GRPCError) as no_writer:
        await note(api, "", 1, {0: 1})
    assert no_writer.value.status is Status.INVALID_ARGUMENT
    with pytest.raises(GRPCError) as no_stream:
        await note(api, "w", 1, {0: 1}, pb.StreamInfo(scope="sc", stream=""))
    assert no_stream.value.status is Status.INVALID_ARGUMENT
    assert await api.subject.member("sc", "s", 100) is None  # nothing half-written


async def test_remove_writer_statuses(api: Served[PgWatermarkStore]) -> None:
    assert await remove(api, "w") == pb.RemoveWriterResponse.UNKNOWN_WRITER
    assert await remove(api, "w", MISSING) == pb.RemoveWriterResponse.UNKNOWN_WRITER
    assert await note(api, "w", 100, {0: 10}) == pb.TimestampResponse.SUCCESS
    assert await remove(api, "w") == pb.RemoveWriterResponse.SUCCESS
    assert await remove(api, "w") == pb.RemoveWriterResponse.SUCCESS  # still there until the round
    found = await api.subject.get_writer_mark("sc", "s", "w")
    assert found is not None and found.value == WriterMark(100, {0: 10}, alive=False)

    # A removed writer that reports again is alive again.
    assert await note(api, "w", 100, {0: 10}) == pb.TimestampResponse.SUCCESS
    found = await api.subject.get_writer_mark("sc", "s", "w")
    assert found is not None and found.value.alive


async def test_remove_writer_with_empty_names_is_invalid(api: Served[PgWatermarkStore]) -> None:
    with pytest.raises(GRPCError) as caught:
        await remove(api, "w", pb.StreamInfo(scope="", stream="s"))
    assert caught.value.status is Status.INVALID_ARGUMENT
