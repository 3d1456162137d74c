"""Delegation tokens follow the caller's own ACL: `serve`'s wiring caps each token at what the
principal the gRPC guard authenticated for that very call may do (the context variable it sets in
the task running the handler), and the store accepts such a token only for that much."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass

import jwt
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import segment_id
from app.security.passwords import hash_password
from app.security.tokens import stream_resource
from app.segmentstore.wire import commands as wc
from app.store.accounts import PgAccountStore
from app.testing.controller import running_controller, serving
from tests.api.test_grpc_streams import config
from tests.segmentstore.server_harness import Client, rid, wid

KEY = b"the principal tests' delegation-token signing key, long enough, never logged anywhere"
Access = pb.StreamInfo.AccessOperation
SEGMENT = "sc/s/0.#epoch.0"


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ADMIN = basic("admin", "admin-pw")
READER = basic("reader", "reader-pw")
GROUP = basic("grouper", "grouper-pw")


@dataclass
class Api:
    stub: ControllerServiceStub
    store: tuple[str, int]


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    """`serve`'s wiring with auth on (no test lookup injected), three accounts, stream sc/s."""
    async with running_controller(db_url, auth_enabled=True, token_signing_key=KEY) as services:
        accounts = PgAccountStore(services.resources.pool)
        await accounts.add("admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1)
        await accounts.add(
            "reader", hash_password("reader-pw"), "prn::/scope:sc,READ;prn::/scope:sc/*,READ", 1
        )
        await accounts.add("grouper", hash_password("grouper-pw"), "prn::/scope:sc/reader-group:g,READ", 1)
        async with serving(services, auth_enabled=True) as servers:
            channel = Channel("127.0.0.1", servers.grpc_port)
            stub = ControllerServiceStub(channel)
            try:
                await stub.createScope(pb.ScopeInfo(scope="sc"), metadata=ADMIN)
                made = await stub.createStream(config("sc", "s", 1), metadata=ADMIN)
                assert made.status == pb.CreateStreamStatus.SUCCESS
                uri = await stub.getURI(
                    pb.SegmentId(streamInfo=info(), segmentId=segment_id(0, 0)), metadata=ADMIN
                )
                yield Api(stub, (uri.endpoint, uri.port))
            finally:
                channel.close()


def info(access: int = Access.UNSPECIFIED, stream: str = "s") -> pb.StreamInfo:
    return pb.StreamInfo(scope="sc", stream=stream, accessOperation=access)


def grants(token: str) -> dict[str, str]:
    claims = jwt.decode(token, KEY, algorithms=["HS512"], audience="segmentstore")
    return {k: v for k, v in claims.items() if k.startswith("prn::")}


async def denied(call: object) -> str:
    assert asyncio.iscoroutine(call)
    with pytest.raises(GRPCError) as caught:
        await call
    assert caught.value.status == Status.PERMISSION_DENIED, caught.value
    return str(caught.value.message)


async def test_a_read_only_account_gets_a_read_token_and_is_refused_what_needs_read_update(api: Api) -> None:
    token = (await api.stub.getDelegationToken(info(Access.READ), metadata=READER)).delegationToken
    assert grants(token) == {stream_resource("sc", "s"): "READ"}
    # Pravega's delegationTokenSupplier: an unspecified access (older clients, the Rust client)
    # and WRITE both need READ_UPDATE on the stream; so does a token-bearing getCurrentSegments.
    assert "READ_UPDATE" in await denied(api.stub.getDelegationToken(info(), metadata=READER))
    await denied(api.stub.getDelegationToken(info(Access.WRITE), metadata=READER))
    await denied(api.stub.getCurrentSegments(info(), metadata=READER))
    plain = await api.stub.getCurrentSegments(info(Access.NONE), metadata=READER)
    assert plain.delegationToken == "" and len(plain.segmentRanges) == 1
    # The administrator's token for the same call carries READ_UPDATE: the principal decides.
    admin = (await api.stub.getDelegationToken(info(), metadata=ADMIN)).delegationToken
    assert grants(admin) == {stream_resource("sc", "s"): "READ_UPDATE"}


async def test_the_store_takes_the_read_token_for_reads_only(api: Api) -> None:
    read_token = (await api.stub.getDelegationToken(info(Access.READ), metadata=READER)).delegationToken
    write_token = (await api.stub.getDelegationToken(info(Access.WRITE), metadata=ADMIN)).delegationToken
    c = await Client.connect(api.store)
    try:
        await c.expect(wc.ReadSegment(SEGMENT, 0, 100, read_token, rid()), wc.SegmentRead)
        refused = await c.call(wc.SetupAppend(rid(), wid(), SEGMENT, read_token))
        assert isinstance(refused, wc.AuthTokenCheckFailed) and refused.error_code == 0, refused
        await c.expect(wc.SetupAppend(rid(), wid(), SEGMENT, write_token), wc.AppendSetup)
    finally:
        await c.close()


async def test_concurrent_calls_each_get_their_own_principals_token(api: Api) -> None:
    calls = [
        api.stub.getDelegationToken(
            info(Access.READ_WRITE if i % 2 else Access.READ), metadata=ADMIN if i % 2 else READER
        )
        for i in range(40)
    ]
    tokens = await asyncio.gather(*calls)
    for i, answer in enumerate(tokens):
        assert grants(answer.delegationToken) == {
            stream_resource("sc", "s"): "READ_UPDATE" if i % 2 else "READ"
        }


async def test_a_reader_groups_stream_needs_only_read_on_the_group_for_a_write_token(api: Api) -> None:
    # StreamAuthParams: `_RGg` is authorized as reader group g, whose writes need READ (Pravega's
    # default); the token is claimed on the stream, which the store matches segments against.
    token = (await api.stub.getDelegationToken(info(Access.WRITE, "_RGg"), metadata=GROUP)).delegationToken
    assert grants(token) == {stream_resource("sc", "_RGg"): "READ_UPDATE"}
    await denied(api.stub.getDelegationToken(info(Access.WRITE, "_RGother"), metadata=GROUP))
    await denied(api.stub.getDelegationToken(info(Access.READ), metadata=GROUP))
