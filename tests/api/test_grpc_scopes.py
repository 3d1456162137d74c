"""createScope, deleteScope, listScopes, checkScopeExists over real gRPC."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.records import ScalingPolicy, StreamConfig
from app.testing.controller import Services


async def test_create_scope_statuses(stub: ControllerServiceStub) -> None:
    assert (await stub.createScope(pb.ScopeInfo(scope="sc1"))).status == pb.CreateScopeStatus.SUCCESS
    assert (await stub.createScope(pb.ScopeInfo(scope="sc1"))).status == pb.CreateScopeStatus.SCOPE_EXISTS
    bad = await stub.createScope(pb.ScopeInfo(scope="abc/def"))
    assert bad.status == pb.CreateScopeStatus.INVALID_SCOPE_NAME
    assert (await stub.checkScopeExists(pb.ScopeInfo(scope="sc1"))).exists
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="abc/def"))).exists


@pytest.mark.parametrize("name", ["a" * 256, "has space", "x/y", "tab\t", "__double"])
async def test_invalid_scope_names_write_nothing(
    stub: ControllerServiceStub, services: Services, name: str
) -> None:
    response = await stub.createScope(pb.ScopeInfo(scope=name))
    assert response.status == pb.CreateScopeStatus.INVALID_SCOPE_NAME
    assert await services.pool.fetchval("SELECT count(*) FROM scopes") == 0


async def test_boundary_names_are_accepted(stub: ControllerServiceStub) -> None:
    for name in ("a" * 255, "_internal", "a.b-c", "0"):
        assert (await stub.createScope(pb.ScopeInfo(scope=name))).status == pb.CreateScopeStatus.SUCCESS


async def test_empty_scope_name_is_a_grpc_error(stub: ControllerServiceStub, services: Services) -> None:
    with pytest.raises(GRPCError) as raised:
        await stub.createScope(pb.ScopeInfo(scope=""))
    assert raised.value.status == Status.INVALID_ARGUMENT
    assert await services.pool.fetchval("SELECT count(*) FROM scopes") == 0


async def test_delete_scope_statuses(stub: ControllerServiceStub, services: Services) -> None:
    missing = await stub.deleteScope(pb.ScopeInfo(scope="nope"))
    assert missing.status == pb.DeleteScopeStatus.SCOPE_NOT_FOUND
    await stub.createScope(pb.ScopeInfo(scope="full"))
    await services.streams.create_stream("full", "s", StreamConfig(ScalingPolicy.fixed(1)))
    busy = await stub.deleteScope(pb.ScopeInfo(scope="full"))
    assert busy.status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
    assert (await stub.checkScopeExists(pb.ScopeInfo(scope="full"))).exists
    await stub.createScope(pb.ScopeInfo(scope="empty"))
    assert (await stub.deleteScope(pb.ScopeInfo(scope="empty"))).status == pb.DeleteScopeStatus.SUCCESS
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="empty"))).exists


async def test_list_scopes_pages_by_1000_and_ends_with_an_empty_page(
    stub: ControllerServiceStub, services: Services
) -> None:
    names = [f"scope-{i:04d}" for i in range(1003)]
    await services.pool.executemany(
        "INSERT INTO scopes (name, created_at) VALUES ($1, 0)", [(n,) for n in names]
    )
    first = await stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="")))
    assert len(first.scopes) == 1000
    assert first.continuationToken.token != ""
    second = await stub.listScopes(pb.ScopesRequest(continuationToken=first.continuationToken))
    assert len(second.scopes) == 3
    assert second.continuationToken.token not in ("", first.continuationToken.token)
    end = await stub.listScopes(pb.ScopesRequest(continuationToken=second.continuationToken))
    assert list(end.scopes) == []
    assert end.continuationToken.token == second.continuationToken.token
    assert sorted([*first.scopes, *second.scopes]) == names


async def test_malformed_continuation_token(stub: ControllerServiceStub) -> None:
    with pytest.raises(GRPCError) as raised:
        await stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="%%%")))
    assert raised.value.status == Status.INVALID_ARGUMENT
