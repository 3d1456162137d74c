"""Transactions over real gRPC: create, ping, checkTransactionState, commit,
abort and listCompletedTransactions, with every status Pravega answers. `stub` runs the
commit, abort and timeout workers; `idle` runs none, so COMMITTING and ABORTING stay put."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Collection

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import qualified_segment_name, transaction_segment_name
from app.domain.requests import RequestKind
from app.domain.txns import TxnId, TxnStatus
from app.testing.controller import Services, running_controller
from tests.api.conftest import Served, serve
from tests.api.test_grpc_lifecycle import S, current, scale_request, seg, stream_with, wait_scaled

LONG_MIN = -(2**63)
LEASE = 10_000  # well inside TEST_SETTINGS' leases (10 ms .. 30 s), and long enough for a test
OTHER = pb.StreamInfo(scope="sc", stream="other")
MISSING = pb.StreamInfo(scope="sc", stream="nosuch")
WAIT_S = 20.0


@pytest.fixture
async def idle(db_url: str) -> AsyncIterator[Served[None]]:
    """No workers: a commit or abort is recorded and its request queued, never processed."""
    async with running_controller(db_url, workers=False) as services, serve(services, None) as served:
        yield served


@pytest.fixture
async def bounded(db_url: str) -> AsyncIterator[Served[None]]:
    """A 5 s bound on the execution time, so a ping can run past it without racing a timeout."""
    bound = running_controller(db_url, txn_max_execution_bound_ms=5_000)
    async with bound as services, serve(services, None) as served:
        yield served


# --- helpers -------------------------------------------------------------------------------------


async def create(stub: ControllerServiceStub, lease: int = LEASE, info: pb.StreamInfo = S) -> pb.TxnId:
    response = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=lease))
    return response.txnId


def request(txn: pb.TxnId, info: pb.StreamInfo = S, writer: str = "", timestamp: int = 0) -> pb.TxnRequest:
    return pb.TxnRequest(streamInfo=info, txnId=txn, writerId=writer, timestamp=timestamp)


async def state(stub: ControllerServiceStub, txn: pb.TxnId, info: pb.StreamInfo = S) -> int:
    return (await stub.checkTransactionState(request(txn, info))).state


async def ping(stub: ControllerServiceStub, txn: pb.TxnId, lease: int, info: pb.StreamInfo = S) -> int:
    return (await stub.pingTransaction(pb.PingTxnRequest(streamInfo=info, txnId=txn, lease=lease))).status


async def commit(
    stub: ControllerServiceStub, txn: pb.TxnId, info: pb.StreamInfo = S, writer: str = "", timestamp: int = 0
) -> int:
    return (await stub.commitTransaction(request(txn, info, writer, timestamp))).status


async def abort(stub: ControllerServiceStub, txn: pb.TxnId, info: pb.StreamInfo = S) -> int:
    return (await stub.abortTransaction(request(txn, info))).status


async def wait_state(
    stub: ControllerServiceStub, txn: pb.TxnId, wanted: Collection[int], info: pb.StreamInfo = S
) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        found = await state(stub, txn, info)
        if found in wanted:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"transaction still {pb.TxnState.State.Name(found)} after {WAIT_S} s")
        await asyncio.sleep(0.02)


async def completed(stub: ControllerServiceStub, info: pb.StreamInfo = S) -> set[tuple[int, int, int]]:
    response = await stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=info))
    return {(r.txnId.highBits, r.txnId.lowBits, r.status) for r in response.response}


def key(txn: pb.TxnId) -> TxnId:
    return TxnId(txn.highBits, txn.lowBits)


async def txn_segment_count(services: Services) -> int:
    return int(
        await services.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE kind = 'transaction'")
    )


async def segment_length(services: Services, segment: int) -> int:
    info = await services.segment_store.get_segment_info(qualified_segment_name("sc", "s", segment))
    return info.length


async def grpc_error(call: object) -> Status:
    assert asyncio.iscoroutine(call)
    with pytest.raises(GRPCError) as raised:
        await call
    return raised.value.status


# --- createTransaction ---------------------------------------------------------------------------


async def test_create_answers_an_id_on_the_active_epoch_and_segments_tiling_the_key_space(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 3)
    response = await stub.createTransaction(
        pb.CreateTxnRequest(streamInfo=S, lease=LEASE, scaleGracePeriod=7)
    )
    txn = response.txnId
    # The Python client sign-extends lowBits: a negative value would corrupt its id.
    assert txn.lowBits >= 0
    assert txn.highBits >> 32 == 0
    assert response.delegationToken == ""
    ranges = [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in response.activeSegments]
    assert [segment for segment, _, _ in ranges] == [seg(0), seg(1), seg(2)]
    assert ranges[0][1] == 0.0 and ranges[-1][2] == 1.0
    assert all(a[2] == b[1] for a, b in itertools.pairwise(ranges))
    assert all(r.segmentId.streamInfo == S for r in response.activeSegments)
    assert await state(stub, txn) == pb.TxnState.OPEN
    # One transaction segment per segment of the txn epoch, named after its parent.
    for segment in (seg(0), seg(1), seg(2)):
        name = transaction_segment_name(qualified_segment_name("sc", "s", segment), txn.highBits, txn.lowBits)
        info = await services.segment_store.get_segment_info(name)
        assert info.length == 0 and not info.sealed
    other = await create(stub)
    assert (other.highBits, other.lowBits) != (txn.highBits, txn.lowBits)


async def test_after_a_scale_the_txn_takes_the_new_epoch_and_relabelled_segments(
    stub: ControllerServiceStub,
) -> None:
    await stream_with(stub, 2)
    assert (await stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)]))).status == (
        pb.ScaleResponse.STARTED
    )
    await wait_scaled(stub, 0)
    response = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))
    assert response.txnId.highBits >> 32 == 1
    assert response.txnId.lowBits >= 0
    # Segment 0 was created in epoch 0 but appears as seg(0, 1): the txn epoch's label.
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in response.activeSegments] == [
        ((1 << 32) | 0, 0.0, 0.5),
        ((1 << 32) | 2, 0.5, 0.75),
        ((1 << 32) | 3, 0.75, 1.0),
    ]


@pytest.mark.parametrize("lease", [9, 0, -1, LONG_MIN, 30_001, 2**63 - 1])
async def test_a_lease_out_of_bounds_is_invalid_argument_and_creates_nothing(
    stub: ControllerServiceStub, services: Services, lease: int
) -> None:
    await stream_with(stub, 1)
    assert await grpc_error(stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=lease))) == (
        Status.INVALID_ARGUMENT
    )
    assert await services.transactions.list_open("sc", "s") == []
    assert await txn_segment_count(services) == 0


async def test_the_lease_bounds_themselves_are_accepted(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    assert await state(stub, await create(stub, 30_000)) == pb.TxnState.OPEN
    lowest = await create(stub, 10)
    assert await state(stub, lowest) in (pb.TxnState.OPEN, pb.TxnState.ABORTING, pb.TxnState.ABORTED)


async def test_create_on_a_missing_stream_or_scope_is_not_found(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    assert await grpc_error(stub.createTransaction(pb.CreateTxnRequest(streamInfo=MISSING, lease=LEASE))) == (
        Status.NOT_FOUND
    )
    nowhere = pb.StreamInfo(scope="nosuch", stream="s")
    assert await grpc_error(stub.createTransaction(pb.CreateTxnRequest(streamInfo=nowhere, lease=LEASE))) == (
        Status.NOT_FOUND
    )


async def test_create_on_a_sealed_stream_is_failed_precondition(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    assert (await stub.sealStream(S)).status == pb.UpdateStreamStatus.SUCCESS
    assert await grpc_error(stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))) == (
        Status.FAILED_PRECONDITION
    )
    assert await txn_segment_count(services) == 0


async def test_empty_names_are_invalid_argument_on_every_txn_rpc(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    txn = await create(stub)
    for info in (pb.StreamInfo(scope="", stream="s"), pb.StreamInfo(scope="sc", stream="")):
        calls = [
            stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=LEASE)),
            stub.pingTransaction(pb.PingTxnRequest(streamInfo=info, txnId=txn, lease=LEASE)),
            stub.checkTransactionState(request(txn, info)),
            stub.commitTransaction(request(txn, info)),
            stub.abortTransaction(request(txn, info)),
            stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=info)),
        ]
        for call in calls:
            assert await grpc_error(call) == Status.INVALID_ARGUMENT
    assert await state(stub, txn) == pb.TxnState.OPEN


# --- pingTransaction ------------------------------------------------------------------------------


async def test_ping_extends_the_lease_and_answers_ok(stub: ControllerServiceStub, services: Services) -> None:
    await stream_with(stub, 1)
    txn = await create(stub)
    before = (await services.transactions.get("sc", "s", key(txn))).active
    assert before is not None
    assert await ping(stub, txn, 20_000) == pb.PingTxnStatus.OK
    after = (await services.transactions.get("sc", "s", key(txn))).active
    assert after is not None
    assert after.value.lease_ms == 20_000
    assert after.value.lease_expiry >= before.value.creation_time + 20_000
    assert after.value.max_exec_expiry == before.value.max_exec_expiry
    assert await ping(stub, txn, LEASE) == pb.PingTxnStatus.OK
    assert await state(stub, txn) == pb.TxnState.OPEN
    # The minimum lease is not enforced on ping (Pravega neither).
    assert await ping(stub, txn, 1) == pb.PingTxnStatus.OK


async def test_ping_with_a_lease_above_the_maximum_is_lease_too_large(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 1)
    txn = await create(stub)
    before = await services.transactions.get("sc", "s", key(txn))
    assert await ping(stub, txn, 30_001) == pb.PingTxnStatus.LEASE_TOO_LARGE
    assert await services.transactions.get("sc", "s", key(txn)) == before
    assert await state(stub, txn) == pb.TxnState.OPEN


async def test_ping_past_the_max_execution_time_is_refused_and_changes_nothing(bounded: Served[None]) -> None:
    stub, services = bounded.stub, bounded.services
    await stream_with(stub, 1)
    txn = await create(stub, LEASE)
    before = await services.transactions.get("sc", "s", key(txn))
    assert before.active is not None
    assert before.active.value.max_exec_expiry == before.active.value.creation_time + 5_000
    assert await ping(stub, txn, 6_000) == pb.PingTxnStatus.MAX_EXECUTION_TIME_EXCEEDED
    assert await services.transactions.get("sc", "s", key(txn)) == before
    assert await state(stub, txn) == pb.TxnState.OPEN
    # A lease that ends inside the bound is still granted.
    assert await ping(stub, txn, 3_000) == pb.PingTxnStatus.OK


async def test_ping_past_max_execution_of_a_ten_ms_lease(stub: ControllerServiceStub) -> None:
    """Lease 10 ms gives a max execution time of 10 s. A first ping, well inside the lease and
    its grace (60 ms in all), keeps it open; one reaching past the 10 s is refused."""
    await stream_with(stub, 1)
    txn = await create(stub, 10)
    assert await ping(stub, txn, 5_000) == pb.PingTxnStatus.OK
    assert await ping(stub, txn, 20_000) == pb.PingTxnStatus.MAX_EXECUTION_TIME_EXCEEDED
    assert await state(stub, txn) == pb.TxnState.OPEN
    assert await ping(stub, txn, 5_000) == pb.PingTxnStatus.OK


async def test_ping_of_an_unknown_id_or_another_streams_id_is_unknown(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    assert (await stub.createStream(_config(OTHER))).status == pb.CreateStreamStatus.SUCCESS
    txn = await create(stub)
    assert await ping(stub, pb.TxnId(highBits=0, lowBits=123_456_789), LEASE) == pb.PingTxnStatus.UNKNOWN
    assert await ping(stub, pb.TxnId(), LEASE) == pb.PingTxnStatus.UNKNOWN
    assert await ping(stub, txn, LEASE, OTHER) == pb.PingTxnStatus.UNKNOWN
    assert await ping(stub, txn, LEASE, MISSING) == pb.PingTxnStatus.UNKNOWN
    assert await state(stub, txn, OTHER) == pb.TxnState.UNKNOWN
    assert await state(stub, txn, MISSING) == pb.TxnState.UNKNOWN
    assert await ping(stub, txn, LEASE) == pb.PingTxnStatus.OK


def _config(info: pb.StreamInfo) -> pb.StreamConfig:
    return pb.StreamConfig(
        streamInfo=info,
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=1),
    )


# --- commit ---------------------------------------------------------------------------------------


async def test_commit_goes_open_committing_committed_and_merges_the_data(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    txn = await create(stub)
    assert await state(stub, txn) == pb.TxnState.OPEN
    parent = qualified_segment_name("sc", "s", seg(0))
    await services.segment_store.append(transaction_segment_name(parent, txn.highBits, txn.lowBits), 100)
    assert await commit(stub, txn, writer="7", timestamp=LONG_MIN) == pb.TxnStatus.SUCCESS
    assert await state(stub, txn) in (pb.TxnState.COMMITTING, pb.TxnState.COMMITTED)
    assert await wait_state(stub, txn, {pb.TxnState.COMMITTED}) == pb.TxnState.COMMITTED
    assert await segment_length(services, seg(0)) == 100
    assert await segment_length(services, seg(1)) == 0
    assert await txn_segment_count(services) == 0
    assert await services.transactions.list_open("sc", "s") == []
    # Idempotent once done, and the other path is refused.
    assert await commit(stub, txn) == pb.TxnStatus.SUCCESS
    assert await abort(stub, txn) == pb.TxnStatus.FAILURE
    assert await ping(stub, txn, LEASE) == pb.PingTxnStatus.COMMITTED
    assert await state(stub, txn) == pb.TxnState.COMMITTED


async def test_commit_records_committing_with_writer_and_order_until_processed(idle: Served[None]) -> None:
    stub, services = idle.stub, idle.services
    await stream_with(stub, 1)
    first, second, plain = await create(stub), await create(stub), await create(stub)
    assert await commit(stub, first, writer="7", timestamp=LONG_MIN) == pb.TxnStatus.SUCCESS
    assert await commit(stub, second, writer="w2", timestamp=1_234) == pb.TxnStatus.SUCCESS
    assert await commit(stub, plain, timestamp=99) == pb.TxnStatus.SUCCESS
    for txn in (first, second, plain):
        assert await state(stub, txn) == pb.TxnState.COMMITTING
        # Idempotent while committing, and refused the other way.
        assert await commit(stub, txn) == pb.TxnStatus.SUCCESS
        assert await abort(stub, txn) == pb.TxnStatus.FAILURE
        assert await state(stub, txn) == pb.TxnState.COMMITTING
    records = {v.value.txn: v.value for v in await services.transactions.list_open("sc", "s")}
    one, two, three = records[key(first)], records[key(second)], records[key(plain)]
    # The client's "no timestamp" (Long.MIN_VALUE) is no commit time.
    assert (one.writer_id, one.commit_time) == ("7", None)
    assert (two.writer_id, two.commit_time) == ("w2", 1_234)
    # Without a writer id the timestamp means nothing and is not kept.
    assert (three.writer_id, three.commit_time) == (None, None)
    assert one.commit_order is not None and two.commit_order is not None and three.commit_order is not None
    assert one.commit_order < two.commit_order < three.commit_order
    assert await completed(stub) == set()
    # The commit work is queued with the decision, waiting for a worker.
    kinds = await services.pool.fetch("SELECT kind FROM requests")
    assert RequestKind.COMMIT_TXNS.value in {row["kind"] for row in kinds}


async def test_commit_after_abort_fails_and_abort_after_commit_fails(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    aborted, committed = await create(stub), await create(stub)
    assert await abort(stub, aborted) == pb.TxnStatus.SUCCESS
    assert await commit(stub, aborted) == pb.TxnStatus.FAILURE
    assert await commit(stub, committed) == pb.TxnStatus.SUCCESS
    assert await abort(stub, committed) == pb.TxnStatus.FAILURE
    assert await wait_state(stub, aborted, {pb.TxnState.ABORTED}) == pb.TxnState.ABORTED
    assert await wait_state(stub, committed, {pb.TxnState.COMMITTED}) == pb.TxnState.COMMITTED
    assert await commit(stub, aborted) == pb.TxnStatus.FAILURE
    assert await abort(stub, committed) == pb.TxnStatus.FAILURE


async def test_commit_and_abort_of_unknown_ids_fail(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    assert (await stub.createStream(_config(OTHER))).status == pb.CreateStreamStatus.SUCCESS
    txn = await create(stub)
    unknown = pb.TxnId(highBits=0, lowBits=987_654_321)
    for info, txn_id in ((S, unknown), (OTHER, txn), (MISSING, txn)):
        assert await commit(stub, txn_id, info) == pb.TxnStatus.FAILURE
        assert await abort(stub, txn_id, info) == pb.TxnStatus.FAILURE
    assert await state(stub, txn) == pb.TxnState.OPEN


async def test_txns_of_an_older_epoch_commit_after_a_scale(
    stub: ControllerServiceStub, services: Services
) -> None:
    """A rolling transaction, observed: a txn of epoch 0 committed after a scale to epoch 1 rolls over; the
    active epoch becomes 3 with epoch 1's numbers, and a later txn commits in place."""
    await stream_with(stub, 2)
    old = await create(stub)
    parent = qualified_segment_name("sc", "s", seg(0))
    await services.segment_store.append(transaction_segment_name(parent, old.highBits, old.lowBits), 40)
    assert (await stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)]))).status == (
        pb.ScaleResponse.STARTED
    )
    await wait_scaled(stub, 0)
    assert await commit(stub, old) == pb.TxnStatus.SUCCESS
    assert await wait_state(stub, old, {pb.TxnState.COMMITTED}) == pb.TxnState.COMMITTED
    assert await current(stub) == [(seg(0, 3), 0.0, 0.5), (seg(2, 3), 0.5, 0.75), (seg(3, 3), 0.75, 1.0)]
    # The data landed in the epoch-2 copy of segment 0, now sealed behind epoch 3.
    assert await segment_length(services, seg(0, 2)) == 40
    newer = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=S, lease=LEASE))
    assert newer.txnId.highBits >> 32 == 1
    assert [r.segmentId.segmentId for r in newer.activeSegments] == [seg(0, 1), seg(2, 1), seg(3, 1)]
    assert await commit(stub, newer.txnId) == pb.TxnStatus.SUCCESS
    assert await wait_state(stub, newer.txnId, {pb.TxnState.COMMITTED}) == pb.TxnState.COMMITTED
    assert [s for s, _, _ in await current(stub)] == [seg(0, 3), seg(2, 3), seg(3, 3)]


# --- abort ----------------------------------------------------------------------------------------


async def test_abort_goes_open_aborting_aborted_and_drops_the_txn_segments(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    txn = await create(stub)
    parent = qualified_segment_name("sc", "s", seg(1))
    await services.segment_store.append(transaction_segment_name(parent, txn.highBits, txn.lowBits), 10)
    assert await abort(stub, txn) == pb.TxnStatus.SUCCESS
    assert await state(stub, txn) in (pb.TxnState.ABORTING, pb.TxnState.ABORTED)
    assert await wait_state(stub, txn, {pb.TxnState.ABORTED}) == pb.TxnState.ABORTED
    assert await txn_segment_count(services) == 0
    assert await segment_length(services, seg(1)) == 0
    assert await abort(stub, txn) == pb.TxnStatus.SUCCESS
    assert await commit(stub, txn) == pb.TxnStatus.FAILURE
    assert await ping(stub, txn, LEASE) == pb.PingTxnStatus.ABORTED


async def test_abort_records_aborting_until_processed(idle: Served[None]) -> None:
    stub, services = idle.stub, idle.services
    await stream_with(stub, 1)
    txn = await create(stub)
    assert await abort(stub, txn) == pb.TxnStatus.SUCCESS
    assert await state(stub, txn) == pb.TxnState.ABORTING
    assert await abort(stub, txn) == pb.TxnStatus.SUCCESS
    assert await commit(stub, txn) == pb.TxnStatus.FAILURE
    assert await state(stub, txn) == pb.TxnState.ABORTING
    assert await completed(stub) == set()
    assert [v.value.status for v in await services.transactions.list_open("sc", "s")] == [TxnStatus.ABORTING]
    kinds = await services.pool.fetch("SELECT kind FROM requests")
    assert RequestKind.ABORT_TXN.value in {row["kind"] for row in kinds}


# --- lease expiry ---------------------------------------------------------------------------------


async def test_an_expired_lease_aborts_the_txn(stub: ControllerServiceStub, services: Services) -> None:
    await stream_with(stub, 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    txn = await create(stub, 200)
    assert await state(stub, txn) == pb.TxnState.OPEN
    await wait_state(stub, txn, {pb.TxnState.ABORTING, pb.TxnState.ABORTED})
    assert loop.time() - started >= 0.2
    assert await ping(stub, txn, LEASE) == pb.PingTxnStatus.ABORTED
    assert await commit(stub, txn) == pb.TxnStatus.FAILURE
    assert await abort(stub, txn) == pb.TxnStatus.SUCCESS
    assert await wait_state(stub, txn, {pb.TxnState.ABORTED}) == pb.TxnState.ABORTED
    assert await completed(stub) == {(txn.highBits, txn.lowBits, pb.TxnResponse.ABORTED)}
    assert await txn_segment_count(services) == 0


async def test_pings_keep_a_short_lease_open(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    txn = await create(stub, 400)
    for _ in range(4):
        await asyncio.sleep(0.2)
        assert await ping(stub, txn, 400) == pb.PingTxnStatus.OK
    assert await state(stub, txn) == pb.TxnState.OPEN
    await wait_state(stub, txn, {pb.TxnState.ABORTING, pb.TxnState.ABORTED})


# --- listCompletedTransactions --------------------------------------------------------------------


async def test_list_completed_has_committed_and_aborted_txns_only(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    assert (await stub.createStream(_config(OTHER))).status == pb.CreateStreamStatus.SUCCESS
    committed, aborted, still_open = await create(stub), await create(stub), await create(stub)
    elsewhere = await create(stub, info=OTHER)
    assert await completed(stub) == set()
    assert await commit(stub, committed) == pb.TxnStatus.SUCCESS
    assert await abort(stub, aborted) == pb.TxnStatus.SUCCESS
    assert await abort(stub, elsewhere, OTHER) == pb.TxnStatus.SUCCESS
    await wait_state(stub, committed, {pb.TxnState.COMMITTED})
    await wait_state(stub, aborted, {pb.TxnState.ABORTED})
    await wait_state(stub, elsewhere, {pb.TxnState.ABORTED}, OTHER)
    assert await completed(stub) == {
        (committed.highBits, committed.lowBits, pb.TxnResponse.COMMITTED),
        (aborted.highBits, aborted.lowBits, pb.TxnResponse.ABORTED),
    }
    assert await completed(stub, OTHER) == {(elsewhere.highBits, elsewhere.lowBits, pb.TxnResponse.ABORTED)}
    assert await state(stub, still_open) == pb.TxnState.OPEN


async def test_list_completed_of_a_missing_stream_is_not_found(stub: ControllerServiceStub) -> None:
    await stream_with(stub, 1)
    call = stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=MISSING))
    assert await grpc_error(call) == Status.NOT_FOUND
