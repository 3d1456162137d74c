"""Delegation tokens in the controller's answers: "" with auth off; with auth on, signed for the
stream with what the caller may do there (the injected ACL lookup), per RPC as Pravega answers;
and the controller's own calls to the store (its master token) carry every workflow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import jwt
import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.errors import NotFound
from app.domain.ids import segment_id
from app.security.tokens import Permission, stream_resource
from app.segmentstore.wire import commands as wc
from app.testing.controller import Services, running_controller
from tests.api.test_grpc_lifecycle import S, stream_with
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.grpc_served import grpc_port, grpc_stub

KEY = b"a delegation-token signing key for the tests, 64 bytes or more, shared with the store"
SEGMENT = "sc/s/0.#epoch.0"
Access = pb.StreamInfo.AccessOperation


@asynccontextmanager
async def controller(
    db_url: str, **overrides: object
) -> AsyncIterator[tuple[Services, ControllerServiceStub]]:
    async with (
        running_controller(db_url, **overrides) as services,
        grpc_port(services, tokens=services.storage.tokens) as port,
        grpc_stub(port) as stub,
    ):
        yield services, stub


@pytest.fixture
async def secured(db_url: str) -> AsyncIterator[tuple[Services, ControllerServiceStub]]:
    async with controller(db_url, auth_enabled=True, token_signing_key=KEY) as running:
        yield running


def info(access: int = Access.UNSPECIFIED) -> pb.StreamInfo:
    return pb.StreamInfo(scope=S.scope, stream=S.stream, accessOperation=access)


def grant(token: str) -> str | None:
    """The permission `token` grants on the test stream (it must verify with KEY)."""
    claims = jwt.decode(token, KEY, algorithms=["HS512"], audience="segmentstore")
    assert claims["sub"] == "segmentstoreresource" and claims["exp"] - claims["iat"] == 600
    return claims.get(stream_resource("sc", "s"))  # type: ignore[no-any-return]


async def test_with_auth_off_every_token_is_empty(db_url: str) -> None:
    async with controller(db_url) as (_, stub):
        await stream_with(stub, 1)
        assert (await stub.getDelegationToken(info())).delegationToken == ""
        assert (await stub.getCurrentSegments(info())).delegationToken == ""


async def test_with_auth_on_and_no_principal_no_token_is_signed(
    secured: tuple[Services, ControllerServiceStub],
) -> None:
    # This service has no guard, so no call has a principal: `serve`'s ACL lookup grants nothing.
    _, stub = secured
    await stream_with(stub, 1)  # the controller's own calls (its master token) create the segments
    assert (await stub.getDelegationToken(info())).delegationToken == ""
    assert (await stub.getCurrentSegments(info())).delegationToken == ""


async def test_each_answer_carries_the_token_pravega_gives(
    secured: tuple[Services, ControllerServiceStub],
) -> None:
    services, stub = secured
    services.storage.tokens.authorize_with(lambda resource: Permission.READ_UPDATE)
    await stream_with(stub, 1)
    assert grant((await stub.getDelegationToken(info())).delegationToken) == "READ_UPDATE"
    assert grant((await stub.getDelegationToken(info(Access.WRITE))).delegationToken) == "READ_UPDATE"
    assert grant((await stub.getDelegationToken(info(Access.READ))).delegationToken) == "READ"
    assert grant((await stub.getCurrentSegments(info())).delegationToken) == "READ_UPDATE"
    assert (await stub.getCurrentSegments(info(Access.NONE))).delegationToken == ""
    assert (
        grant((await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info()))).delegationToken)
        == "READ_UPDATE"
    )
    epoch = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info(), epoch=0))
    assert grant(epoch.delegationToken) == "READ_UPDATE"
    cut = {segment_id(0, 0): 0}
    between = await stub.getSegmentsBetween(pb.StreamCutRange(streamInfo=info(), **{"from": cut}))
    assert grant(between.delegationToken) == "READ"
    txn = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info(), lease=10_000))
    assert grant(txn.delegationToken) == "READ_UPDATE"
    # Pravega answers successors with an empty token (its check there signs nothing).
    following = await stub.getSegmentsImmediatelyFollowing(pb.SegmentId(streamInfo=info(), segmentId=0))
    assert following.delegationToken == ""


async def test_a_token_never_grants_more_than_the_caller_has(
    secured: tuple[Services, ControllerServiceStub],
) -> None:
    services, stub = secured
    acl = {stream_resource("sc", "s"): Permission.READ}
    services.storage.tokens.authorize_with(lambda resource: acl.get(resource, Permission.NONE))
    await stream_with(stub, 1)
    assert grant((await stub.getDelegationToken(info())).delegationToken) == "READ"
    other = pb.StreamInfo(scope="sc", stream="other")
    assert (await stub.getDelegationToken(other)).delegationToken == ""


async def test_workflows_run_with_auth_on_and_a_signed_token_writes_to_the_store(
    secured: tuple[Services, ControllerServiceStub],
) -> None:
    services, stub = secured
    services.storage.tokens.authorize_with(lambda resource: Permission.READ_UPDATE)
    await stream_with(stub, 1)
    token = (await stub.getDelegationToken(info())).delegationToken
    uri = await stub.getURI(pb.SegmentId(streamInfo=info(), segmentId=segment_id(0, 0)))
    c = await Client.connect((uri.endpoint, uri.port))
    try:
        writer = wid()
        refused = await c.call(wc.SetupAppend(rid(), writer, SEGMENT, ""))
        assert isinstance(refused, wc.AuthTokenCheckFailed) and refused.error_code == 0
        await c.expect(wc.SetupAppend(rid(), writer, SEGMENT, token), wc.AppendSetup)
        assert isinstance(await c.append(writer, event(b"e"), 1), wc.DataAppended)
    finally:
        await c.close()
    # Transactions commit (a merge), the stream seals and is deleted: all on the master token.
    txn = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info(), lease=10_000))
    committed = await stub.commitTransaction(pb.TxnRequest(streamInfo=info(), txnId=txn.txnId))
    assert committed.status == pb.TxnStatus.SUCCESS
    for _ in range(500):
        state = await stub.checkTransactionState(pb.TxnRequest(streamInfo=info(), txnId=txn.txnId))
        if state.state == pb.TxnState.COMMITTED:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the transaction did not commit")
    assert (await stub.sealStream(info())).status == pb.UpdateStreamStatus.SUCCESS
    assert (await stub.deleteStream(info())).status == pb.DeleteStreamStatus.SUCCESS
    with pytest.raises(NotFound):
        await services.storage.client.get_segment_info(SEGMENT)
