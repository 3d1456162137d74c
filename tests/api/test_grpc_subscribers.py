"""listSubscribers and updateSubscriberStreamCut over a real gRPC server: every status of the
Pravega's controller, in the order it checks them, using updateSubscriberStreamCutTest's cuts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.subscribers import SubscriberRpcs
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.retention import SubscriberService
from app.store.retention import PgRetentionStore
from app.testing.controller import Services, running_controller
from tests.api.conftest import served

SC, ST = "subs", "s"
RG = uuid.UUID("0c9ae2ba-56b0-4a3c-8c52-5f6a2d1f33aa")
SUB1, SUB2 = f"{SC}/subscriber1", f"{SC}/subscriber2"
UPDATE = pb.UpdateSubscriberStatus


@pytest.fixture
async def s(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        await services.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(2)))
        yield services


@pytest.fixture
def subscribers(s: Services) -> SubscriberService:
    return SubscriberService(s.stream_store, PgRetentionStore(s.pool), s.clock)


@pytest.fixture
async def stub(s: Services, subscribers: SubscriberService) -> AsyncIterator[ControllerServiceStub]:
    async with served(s, extensions=[SubscriberRpcs(subscribers)]) as connected:
        yield connected


def update(
    cut: dict[int, int],
    *,
    subscriber: str = SUB1,
    rg: str = str(RG),
    generation: int = 0,
    stream: str = ST,
    scope: str = SC,
) -> pb.SubscriberStreamCut:
    return pb.SubscriberStreamCut(
        subscriber=subscriber,
        generation=generation,
        readerGroupId=rg,
        streamCut=pb.StreamCut(streamInfo=pb.StreamInfo(scope=scope, stream=stream), cut=cut),
    )


async def status_of(stub: ControllerServiceStub, request: pb.SubscriberStreamCut) -> int:
    reply = await stub.updateSubscriberStreamCut(request)
    return int(reply.status)


async def test_list_subscribers(stub: ControllerServiceStub, subscribers: SubscriberService) -> None:
    missing = await stub.listSubscribers(pb.StreamInfo(scope=SC, stream="nostream"))
    assert missing.status == pb.SubscribersResponse.STREAM_NOT_FOUND and list(missing.subscribers) == []
    empty = await stub.listSubscribers(pb.StreamInfo(scope=SC, stream=ST))
    assert empty.status == pb.SubscribersResponse.SUCCESS and list(empty.subscribers) == []

    await subscribers.add_subscriber(SC, ST, SUB2, RG, 0)
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 0)
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 0)  # once only
    listed = await stub.listSubscribers(pb.StreamInfo(scope=SC, stream=ST))
    assert listed.status == pb.SubscribersResponse.SUCCESS
    assert list(listed.subscribers) == [SUB1, SUB2]


async def test_update_subscriber_stream_cut_statuses(
    s: Services, stub: ControllerServiceStub, subscribers: SubscriberService
) -> None:
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 0)
    await subscribers.add_subscriber(SC, ST, SUB2, RG, 0)
    cut1 = {0: 50, 1: 20}

    assert await status_of(stub, update(cut1)) == UPDATE.SUCCESS
    assert await status_of(stub, update(cut1, subscriber=SUB2)) == UPDATE.SUCCESS
    assert await status_of(stub, update({0: 70, 1: 30}, subscriber=SUB2)) == UPDATE.SUCCESS
    # Behind the subscriber's previous cut, and a partial cut: not valid.
    assert await status_of(stub, update({0: 20, 1: 1}, subscriber=SUB2)) == UPDATE.STREAM_CUT_NOT_VALID
    assert await status_of(stub, update({0: 25}, subscriber=SUB2)) == UPDATE.STREAM_CUT_NOT_VALID
    # The same cut again is not behind.
    assert await status_of(stub, update({0: 70, 1: 30}, subscriber=SUB2)) == UPDATE.SUCCESS

    assert await status_of(stub, update(cut1, stream="nostream")) == UPDATE.STREAM_NOT_FOUND
    assert await status_of(stub, update(cut1, subscriber="nosubscriber", rg=str(uuid.uuid4()))) == (
        UPDATE.SUBSCRIBER_NOT_FOUND
    )
    stored = await PgRetentionStore(s.pool).get_subscriber(SC, ST, SUB2)
    assert stored is not None and stored.value.truncation_stream_cut == {0: 70, 1: 30}
    first = await PgRetentionStore(s.pool).get_subscriber(SC, ST, SUB1)
    assert first is not None and first.value.truncation_stream_cut == cut1


async def test_checks_are_made_in_order(stub: ControllerServiceStub, subscribers: SubscriberService) -> None:
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 3)
    bad_cut = {0: 25}
    # A missing stream wins over everything else.
    assert await status_of(stub, update(bad_cut, stream="nostream", rg="x", generation=9)) == (
        UPDATE.STREAM_NOT_FOUND
    )
    # Then the subscriber: absent, another reader group's id, or no UUID at all.
    assert (
        await status_of(stub, update(bad_cut, subscriber=SUB2, generation=9)) == UPDATE.SUBSCRIBER_NOT_FOUND
    )
    assert await status_of(stub, update(bad_cut, rg=str(uuid.uuid4()), generation=9)) == (
        UPDATE.SUBSCRIBER_NOT_FOUND
    )
    assert (
        await status_of(stub, update(bad_cut, rg="not-a-uuid", generation=9)) == UPDATE.SUBSCRIBER_NOT_FOUND
    )
    # Then the generation, before the cut is looked at.
    assert await status_of(stub, update(bad_cut, generation=2)) == UPDATE.GENERATION_MISMATCH
    assert await status_of(stub, update(bad_cut, generation=3)) == UPDATE.STREAM_CUT_NOT_VALID
    assert await status_of(stub, update({0: 1, 1: 1}, generation=3)) == UPDATE.SUCCESS


async def test_cuts_that_are_not_valid(stub: ControllerServiceStub, subscribers: SubscriberService) -> None:
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 0)
    for cut in ({}, {0: 1, 7: 1}, {0: 1, 1: 1, 1 << 32 | 2: -1}, {1 << 40: 1}):
        assert await status_of(stub, update(cut)) == UPDATE.STREAM_CUT_NOT_VALID, cut


async def test_a_raised_generation_is_required_after_a_reader_group_update(
    stub: ControllerServiceStub, subscribers: SubscriberService
) -> None:
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 0)
    assert await status_of(stub, update({0: 1, 1: 1})) == UPDATE.SUCCESS
    await subscribers.add_subscriber(SC, ST, SUB1, RG, 1)
    assert await status_of(stub, update({0: 2, 1: 2})) == UPDATE.GENERATION_MISMATCH
    assert await status_of(stub, update({0: 2, 1: 2}, generation=1)) == UPDATE.SUCCESS


@pytest.mark.parametrize(("scope", "stream"), [("", ST), (SC, "")])
async def test_empty_names_are_grpc_errors(stub: ControllerServiceStub, scope: str, stream: str) -> None:
    with pytest.raises(GRPCError) as listed:
        await stub.listSubscribers(pb.StreamInfo(scope=scope, stream=stream))
    assert listed.value.status is Status.INVALID_ARGUMENT
    with pytest.raises(GRPCError) as updated:
        await stub.updateSubscriberStreamCut(update({0: 1, 1: 1}, scope=scope, stream=stream))
    assert updated.value.status is Status.INVALID_ARGUMENT
