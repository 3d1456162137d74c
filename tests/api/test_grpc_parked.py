"""A workflow that fails finally over real gRPC with the request workers running: the caller gets
its RPC's FAILURE status at once, the request is parked, and the stream takes its next
operations (issue 16, defect 2)."""

from __future__ import annotations

import time

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.records import StreamState, TruncationRecord
from app.domain.requests import RequestKind
from app.testing.controller import Services
from tests.api.test_grpc_streams import config, make_scope
from tests.support.parked import parked_soon

S = pb.StreamInfo(scope="sc", stream="s")


async def test_defect_2_truncation_past_a_segments_end_is_parked_and_the_stream_can_be_sealed_and_deleted(
    stub: ControllerServiceStub, services: Services
) -> None:
    await make_scope(stub)
    assert (await stub.createStream(config("sc", "s", 1))).status == pb.CreateStreamStatus.SUCCESS

    # Segment 0 is empty: the segment store refuses to truncate it at 100, which no retry changes.
    started = time.monotonic()
    truncated = await stub.truncateStream(pb.StreamCut(streamInfo=S, cut={0: 100}))
    elapsed = time.monotonic() - started
    assert truncated.status == pb.UpdateStreamStatus.FAILURE
    assert elapsed < 10, f"truncateStream answered after {elapsed:.1f} s (completion timeout 30 s)"

    # The stream is ACTIVE again, its truncation as it was; the request is parked with its error.
    assert (await services.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE
    assert (await services.stream_store.get_truncation("sc", "s")).value == TruncationRecord()
    [parked] = await parked_soon(services.requests)
    assert parked.kind is RequestKind.TRUNCATE_STREAM
    assert parked.last_error is not None and "its length is 0" in parked.last_error

    # Later operations proceed: update, seal, delete.
    updated = await stub.updateStream(config("sc", "s", 2))
    assert updated.status == pb.UpdateStreamStatus.SUCCESS
    assert len((await stub.getCurrentSegments(S)).segmentRanges) == 2
    assert (await stub.sealStream(S)).status == pb.UpdateStreamStatus.SUCCESS
    assert (await stub.deleteStream(S)).status == pb.DeleteStreamStatus.SUCCESS
    # Only the parked request is left, for an operator to see and drop.
    assert [r.id for r in await services.requests.list_parked(0, 10)] == [parked.id]
    assert await services.pool.fetchval("SELECT count(*) FROM requests WHERE parked_at IS NULL") == 0
