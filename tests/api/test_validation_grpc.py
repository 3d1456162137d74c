"""Issue 16's input defects over real gRPC: every out-of-bounds number and every string PostgreSQL
cannot store is answered INVALID_ARGUMENT (or the RPC's own status) before anything is written,
and the stream stays usable afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.watermarks import WatermarkRpcs
from app.domain.limits import MAX_SEGMENTS_PER_EPOCH, MAX_TIMESTAMP_MS
from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.services.watermarks import WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import Services
from tests.api.conftest import served
from tests.api.test_grpc_lifecycle import S, current, scale_request, seg, stream_with, wait_scaled
from tests.api.test_grpc_streams import config, make_scope

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
LEASE = 10_000


async def grpc_status(call: object) -> tuple[Status, str]:
    assert asyncio.iscoroutine(call)
    with pytest.raises(GRPCError) as raised:
        await call
    return raised.value.status, raised.value.message or ""


async def requests_queued(services: Services) -> int:
    return int(await services.pool.fetchval("SELECT count(*) FROM requests"))


@pytest.fixture
async def wm_stub(services: Services) -> AsyncIterator[ControllerServiceStub]:
    rpcs = WatermarkRpcs(WatermarkService(PgWatermarkStore(services.pool), services.clock))
    async with served(services, [rpcs]) as connected:
        yield connected


# --- defect 1: a scale timestamp at Long.MAX_VALUE ------------------------------------------------


async def test_defect_1_scale_timestamp_at_long_max_is_refused(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    for timestamp in (LONG_MAX, MAX_TIMESTAMP_MS + 1, -1, LONG_MIN):
        request = scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)])
        request.scaleTimestamp = timestamp
        status, message = await grpc_status(stub.scale(request))
        assert status == Status.INVALID_ARGUMENT, timestamp
        assert "scaleTimestamp" in message
    assert (await services.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE
    assert (await services.stream_store.get_epoch_transition("sc", "s")).value is None
    # The largest accepted time works, and the scale after it too (no bigint overflow on +1).
    request = scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)])
    request.scaleTimestamp = MAX_TIMESTAMP_MS
    assert (await stub.scale(request)).status == pb.ScaleResponse.STARTED
    await wait_scaled(stub, 0)
    follow_up = scale_request([seg(2, 1)], [(0.5, 0.6), (0.6, 0.75)])
    assert (await stub.scale(follow_up)).status == pb.ScaleResponse.STARTED
    await wait_scaled(stub, 1)
    assert len(await current(stub)) == 4
    assert (await services.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE


# --- defect 5 (NUL half): names the database cannot store ------------------------------------------


async def test_defect_5_a_name_with_nul_is_invalid_argument_not_unavailable(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 1)
    bad = "a\x00b"
    txn = (await stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))).txnId
    calls = [
        stub.createScope(pb.ScopeInfo(scope=bad)),
        stub.deleteScope(pb.ScopeInfo(scope=bad)),
        stub.deleteScopeRecursive(pb.ScopeInfo(scope=bad)),
        stub.checkScopeExists(pb.ScopeInfo(scope=bad)),
        stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=bad))),
        stub.listStreamsInScopeForTag(
            pb.StreamsInScopeWithTagRequest(scope=pb.ScopeInfo(scope="sc"), tag=bad)
        ),
        stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=bad))),
        stub.createStream(config("sc", bad)),
        stub.createStream(config(bad, "s2")),
        stub.createStream(config("sc", "s3", tags=["ok", bad])),
        stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream=bad)),
        stub.checkStreamExists(pb.StreamInfo(scope=bad, stream="s")),
        stub.updateStream(config("sc", bad)),
        stub.sealStream(pb.StreamInfo(scope="sc", stream=bad)),
        stub.deleteStream(pb.StreamInfo(scope=bad, stream="s")),
        stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream=bad)),
        stub.createTransaction(
            pb.CreateTxnRequest(streamInfo=pb.StreamInfo(scope="sc", stream=bad), lease=LEASE)
        ),
        stub.commitTransaction(pb.TxnRequest(streamInfo=S, txnId=txn, writerId=bad, timestamp=5)),
    ]
    for call in calls:
        status, message = await grpc_status(call)
        assert status == Status.INVALID_ARGUMENT
        assert "NUL" in message
    assert await stub.checkTransactionState(pb.TxnRequest(streamInfo=S, txnId=txn)) == pb.TxnState(
        state=pb.TxnState.OPEN
    )
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 2  # s and its mark stream


async def test_defect_5_a_writer_id_with_nul_is_invalid_argument(wm_stub: ControllerServiceStub) -> None:
    await stream_with(wm_stub, 1)
    request = pb.TimestampFromWriter(
        writer="w\x00", position=pb.StreamCut(streamInfo=S, cut={0: 1}), timestamp=5
    )
    status, message = await grpc_status(wm_stub.noteTimestampFromWriter(request))
    assert status == Status.INVALID_ARGUMENT and "NUL" in message


# --- defect 6: accepted nonsense ---------------------------------------------------------------------


async def test_defect_6_ping_with_lease_zero_or_negative_is_refused_and_the_txn_stays_open(
    stub: ControllerServiceStub,
) -> None:
    await stream_with(stub, 1)
    txn = (await stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))).txnId
    for lease in (0, -1, LONG_MIN):
        status, message = await grpc_status(
            stub.pingTransaction(pb.PingTxnRequest(streamInfo=S, txnId=txn, lease=lease))
        )
        assert status == Status.INVALID_ARGUMENT
        assert "lease" in message
    state = await stub.checkTransactionState(pb.TxnRequest(streamInfo=S, txnId=txn))
    assert state.state == pb.TxnState.OPEN


@pytest.mark.parametrize(
    ("retention", "field"),
    [
        (
            pb.RetentionPolicy(retentionType=pb.RetentionPolicy.SIZE, retentionParam=100, retentionMax=50),
            "retentionMax",
        ),
        (
            pb.RetentionPolicy(retentionType=pb.RetentionPolicy.TIME, retentionParam=60_000, retentionMax=1),
            "retentionMax",
        ),
        (
            pb.RetentionPolicy(
                retentionType=pb.RetentionPolicy.TIME, retentionParam=LONG_MAX, retentionMax=LONG_MAX
            ),
            "retentionParam",
        ),
        (
            pb.RetentionPolicy(
                retentionType=pb.RetentionPolicy.SIZE, retentionParam=LONG_MAX, retentionMax=LONG_MAX
            ),
            "retentionParam",
        ),
    ],
)
async def test_defect_6_retention_nonsense_is_refused(
    stub: ControllerServiceStub, services: Services, retention: pb.RetentionPolicy, field: str
) -> None:
    await make_scope(stub)
    status, message = await grpc_status(stub.createStream(config("sc", "r", 1, retention=retention)))
    assert status == Status.INVALID_ARGUMENT and field in message
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 0
    assert (await stub.createStream(config("sc", "s", 1))).status == pb.CreateStreamStatus.SUCCESS
    status, message = await grpc_status(stub.updateStream(config("sc", "s", 1, retention=retention)))
    assert status == Status.INVALID_ARGUMENT and field in message
    assert await requests_queued(services) == 0


async def test_defect_6_an_empty_tag_is_refused(stub: ControllerServiceStub, services: Services) -> None:
    await make_scope(stub)
    status, message = await grpc_status(stub.createStream(config("sc", "t", 1, tags=["a", ""])))
    assert status == Status.INVALID_ARGUMENT and "tag" in message
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 0


async def test_defect_6_an_auto_scale_factor_of_int_max_is_refused(
    stub: ControllerServiceStub, services: Services
) -> None:
    await make_scope(stub)
    by_rate = pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC
    status, message = await grpc_status(
        stub.createStream(config("sc", "f", 1, scale_type=by_rate, rate=10, factor=INT_MAX))
    )
    assert status == Status.INVALID_ARGUMENT and "scaleFactor" in message
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 0
    largest = config("sc", "f", 1, scale_type=by_rate, rate=10, factor=MAX_SEGMENTS_PER_EPOCH)
    assert (await stub.createStream(largest)).status == pb.CreateStreamStatus.SUCCESS


async def test_defect_6_create_transaction_on_a_sealing_stream_is_failed_precondition(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 1)
    state = await services.stream_store.get_state("sc", "s")
    await services.stream_store.set_state("sc", "s", StreamState.SEALING, state.version)
    status, message = await grpc_status(
        stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))
    )
    assert status == Status.FAILED_PRECONDITION
    assert "SEALING" in message or "seal" in message


# --- defect 9 (bounds half) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "refusal"),
    [
        # The reproduction: its request is over the 4 MiB message limit, refused unread.
        (500_000, Status.RESOURCE_EXHAUSTED),
        # Within the message limit, over the segment bound: refused by validation, naming the bound.
        (20_000, Status.INVALID_ARGUMENT),
    ],
)
async def test_defect_9_a_scale_into_500000_segments_is_refused(
    stub: ControllerServiceStub, services: Services, count: int, refusal: Status
) -> None:
    await stream_with(stub, 1)
    ranges = [(i / count, (i + 1) / count) for i in range(count)]
    ranges[-1] = (ranges[-1][0], 1.0)
    status, message = await grpc_status(stub.scale(scale_request([seg(0)], ranges)))
    assert status == refusal
    if refusal == Status.INVALID_ARGUMENT:
        assert str(MAX_SEGMENTS_PER_EPOCH) in message
    assert (await services.stream_store.get_epoch_transition("sc", "s")).value is None
    assert await requests_queued(services) == 0


async def test_defect_9_a_scale_past_the_epoch_bound_is_refused(
    stub: ControllerServiceStub, services: Services
) -> None:
    """Each request is within the bound, but the epoch it would leave is not."""
    await stream_with(stub, MAX_SEGMENTS_PER_EPOCH)
    status, message = await grpc_status(
        stub.scale(scale_request([seg(0)], [(0.0, 0.00005), (0.00005, 0.0001)]))
    )
    assert status == Status.INVALID_ARGUMENT and "epoch" in message
    assert (await services.stream_store.get_epoch_transition("sc", "s")).value is None


@pytest.mark.parametrize("segments", [MAX_SEGMENTS_PER_EPOCH + 1, 100_000, INT_MAX])
async def test_defect_9_create_and_update_with_too_many_segments_are_refused(
    stub: ControllerServiceStub, services: Services, segments: int
) -> None:
    await make_scope(stub)
    status, message = await grpc_status(stub.createStream(config("sc", "big", segments)))
    assert status == Status.INVALID_ARGUMENT and "minNumSegments" in message
    assert await services.pool.fetchval("SELECT count(*) FROM streams") == 0
    assert (await stub.createStream(config("sc", "s", 1))).status == pb.CreateStreamStatus.SUCCESS
    status, message = await grpc_status(stub.updateStream(config("sc", "s", segments)))
    assert status == Status.INVALID_ARGUMENT and "minNumSegments" in message
    assert await requests_queued(services) == 0
    assert len(await current(stub)) == 1


async def test_defect_9_a_negative_truncation_offset_is_refused(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    status, message = await grpc_status(stub.truncateStream(pb.StreamCut(streamInfo=S, cut={0: -1, 1: 0})))
    assert status == Status.INVALID_ARGUMENT and "negative" in message
    assert (await services.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE
    assert await requests_queued(services) == 0


async def test_defect_9_the_internal_scope_cannot_be_deleted(stub: ControllerServiceStub) -> None:
    await make_scope(stub, "_system")
    for call in (
        stub.deleteScopeRecursive(pb.ScopeInfo(scope="_system")),
        stub.deleteScope(pb.ScopeInfo(scope="_system")),
    ):
        status, message = await grpc_status(call)
        assert status == Status.INVALID_ARGUMENT and "_system" in message
    assert (await stub.checkScopeExists(pb.ScopeInfo(scope="_system"))).exists


# --- the rest of the layer: timestamps a writer gives ---------------------------------------------


async def test_writer_times_outside_the_timestamp_bound(
    wm_stub: ControllerServiceStub,
) -> None:
    await stream_with(wm_stub, 1)

    async def note(timestamp: int) -> int:
        request = pb.TimestampFromWriter(
            writer="w", position=pb.StreamCut(streamInfo=S, cut={0: 1}), timestamp=timestamp
        )
        return int((await wm_stub.noteTimestampFromWriter(request)).result)

    assert await note(LONG_MAX) == pb.TimestampResponse.INVALID_TIME
    assert await note(MAX_TIMESTAMP_MS + 1) == pb.TimestampResponse.INVALID_TIME
    assert await note(MAX_TIMESTAMP_MS) == pb.TimestampResponse.SUCCESS
    txn = (await wm_stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))).txnId
    status, message = await grpc_status(
        wm_stub.commitTransaction(pb.TxnRequest(streamInfo=S, txnId=txn, writerId="w", timestamp=LONG_MAX))
    )
    assert status == Status.INVALID_ARGUMENT and "timestamp" in message
    # Long.MIN_VALUE stays the clients' "no timestamp".
    committed = await wm_stub.commitTransaction(
        pb.TxnRequest(streamInfo=S, txnId=txn, writerId="w", timestamp=LONG_MIN)
    )
    assert committed.status == pb.TxnStatus.SUCCESS


async def test_defect_5_ill_formed_names_are_refused_before_any_query(stub: ControllerServiceStub) -> None:
    """Names outside Pravega's rule can name no stream: the segment, history and transaction
    RPCs refuse them with the rule, instead of looking them up."""
    await stream_with(stub, 1)
    for info in (pb.StreamInfo(scope="sc", stream="a b"), pb.StreamInfo(scope="s/c", stream="s")):
        calls = [
            stub.getCurrentSegments(info),
            stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info, epoch=0)),
            stub.isSegmentValid(pb.SegmentId(streamInfo=info, segmentId=0)),
            stub.getSegmentsImmediatelyFollowing(pb.SegmentId(streamInfo=info, segmentId=0)),
            stub.isStreamCutValid(pb.StreamCut(streamInfo=info, cut={0: 0})),
            stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=LEASE)),
        ]
        for call in calls:
            status, message = await grpc_status(call)
            assert status == Status.INVALID_ARGUMENT
            assert "invalid" in message and "name" in message


async def test_defect_5_ill_formed_names_answer_the_not_found_status_of_the_contract(
    stub: ControllerServiceStub, services: Services
) -> None:
    """Where the RPC has a status for a missing stream, an ill-formed name gets it, as from
    Pravega (whose lookup finds nothing), but without a lookup: a row planted under that name
    behind the API's back is never seen."""
    await stream_with(stub, 1)
    planted = StreamConfig(ScalingPolicy.fixed(1))
    await services.stream_store.create_stream_metadata("sc", "no such", planted, 1)
    info = pb.StreamInfo(scope="sc", stream="no such")
    not_found = pb.UpdateStreamStatus.STREAM_NOT_FOUND
    assert (await stub.updateStream(config("sc", "no such", 1))).status == not_found
    assert (await stub.truncateStream(pb.StreamCut(streamInfo=info, cut={0: 0}))).status == not_found
    assert (await stub.sealStream(info)).status == not_found
    assert (await stub.deleteStream(info)).status == pb.DeleteStreamStatus.STREAM_NOT_FOUND
    assert (await stub.scale(scale_request([seg(0)], [(0.0, 1.0)], info))).status == pb.ScaleResponse.FAILURE
    checked = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=0))
    assert checked.status == pb.ScaleStatusResponse.INVALID_INPUT
    assert not (await stub.checkStreamExists(info)).exists
    status, _ = await grpc_status(stub.getStreamConfiguration(info))
    assert status == Status.NOT_FOUND
    status, _ = await grpc_status(stub.sealStream(pb.StreamInfo(scope="sc", stream="")))
    assert status == Status.INVALID_ARGUMENT
