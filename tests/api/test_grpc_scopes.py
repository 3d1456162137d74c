"""createScope, deleteScope, listScopes, checkScopeExists over real gRPC, and `_system`, Pravega's
internal scope: always listed (last, once) and found; its listings answer the streams and tables
really stored in it, none without a row."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.kvtables import KvtRpcs
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.names import INTERNAL_SCOPE
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.kvtables import KvtService
from app.services.paging import Page
from app.store.kvtables import PgKvtStore
from app.testing.controller import Services
from tests.api.conftest import served


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
    assert list(second.scopes) == [*names[1000:], INTERNAL_SCOPE]
    assert second.continuationToken.token not in ("", first.continuationToken.token)
    end = await stub.listScopes(pb.ScopesRequest(continuationToken=second.continuationToken))
    assert list(end.scopes) == []
    assert end.continuationToken.token == second.continuationToken.token
    assert [*first.scopes, *second.scopes] == [*names, INTERNAL_SCOPE]


async def test_malformed_continuation_token(stub: ControllerServiceStub) -> None:
    with pytest.raises(GRPCError) as raised:
        await stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="%%%")))
    assert raised.value.status == Status.INVALID_ARGUMENT


async def listing(stub: ControllerServiceStub) -> list[pb.ScopesResponse]:
    """Every page of listScopes up to and including the empty one that ends it."""
    pages = [await stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token="")))]
    while pages[-1].scopes:
        assert pages[-1].continuationToken.token, "a non-empty page must carry a token"
        pages.append(await stub.listScopes(pb.ScopesRequest(continuationToken=pages[-1].continuationToken)))
        assert len(pages) < 10
    assert pages[-1].continuationToken.token == (pages[-2].continuationToken.token if len(pages) > 1 else "")
    return pages


def listed(pages: list[pb.ScopesResponse]) -> list[str]:
    return [name for page in pages for name in page.scopes]


async def test_a_fresh_controller_lists_only_system_and_then_ends(stub: ControllerServiceStub) -> None:
    pages = await listing(stub)
    assert [list(p.scopes) for p in pages] == [[INTERNAL_SCOPE], []]
    assert pages[0].continuationToken.token != ""


async def test_system_is_listed_last_and_counted_with_the_created_scopes(stub: ControllerServiceStub) -> None:
    # Pravega's Rust client's controller test: three scopes made on a fresh server, four listed.
    for name in ("sc-b", "sc-a", "sc-c"):
        assert (await stub.createScope(pb.ScopeInfo(scope=name))).status == pb.CreateScopeStatus.SUCCESS
    assert listed(await listing(stub)) == ["sc-a", "sc-b", "sc-c", INTERNAL_SCOPE]


async def test_a_system_row_is_listed_once(stub: ControllerServiceStub) -> None:
    # createScope accepts the name, as Pravega's controller does: the row and the always-listed scope are one.
    assert (await stub.createScope(pb.ScopeInfo(scope=INTERNAL_SCOPE))).status == pb.CreateScopeStatus.SUCCESS
    await stub.createScope(pb.ScopeInfo(scope="a"))
    await stub.createScope(pb.ScopeInfo(scope="z"))
    assert listed(await listing(stub)) == ["a", "z", INTERNAL_SCOPE]


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_small_pages_list_every_scope_once_with_a_token_on_each(services: Services, limit: int) -> None:
    # Pages of one hold a `_system` row alone: it is skipped, not mistaken for the end.
    for name in ("a", INTERNAL_SCOPE, "b", "c"):
        await services.scopes.create_scope(name)
    pages: list[Page] = [await services.scopes.list_scopes_with_internal("", limit)]
    while pages[-1].names:
        assert pages[-1].token and len(pages[-1].names) <= limit
        pages.append(await services.scopes.list_scopes_with_internal(pages[-1].token, limit))
    assert pages[-1].token == pages[-2].token
    assert [name for page in pages for name in page.names] == ["a", "b", "c", INTERNAL_SCOPE]


async def test_system_exists_and_lists_what_is_stored_in_it(
    stub: ControllerServiceStub, services: Services
) -> None:
    system = pb.ScopeInfo(scope=INTERNAL_SCOPE)
    assert (await stub.checkScopeExists(system)).exists
    # No row: Pravega's internal streams are rows of the requests table here, so none is listed.
    token = pb.ContinuationToken(token="dG9rZW4=")
    streams = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=system, continuationToken=token))
    assert streams.status == pb.StreamsInScopeResponse.SUCCESS
    assert list(streams.streams) == [] and streams.continuationToken.token == token.token
    tagged = await stub.listStreamsInScopeForTag(pb.StreamsInScopeWithTagRequest(scope=system, tag="t"))
    assert tagged.status == pb.StreamsInScopeResponse.SUCCESS and list(tagged.streams) == []
    kvts = KvtService(PgKvtStore(services.pool), services.clock, services.requests, completion_timeout_s=5)
    async with served(services, extensions=[KvtRpcs(kvts)]) as with_tables:
        tables = await with_tables.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=system))
    assert tables.status == pb.KVTablesInScopeResponse.SUCCESS and list(tables.kvtables) == []
    # Another missing scope is still missing.
    missing = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="nope")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND
    assert not (await stub.checkScopeExists(pb.ScopeInfo(scope="nope"))).exists
    # A stream a client created there (with the scope's row) is listed, as any stream.
    await stub.createScope(system)
    await services.streams.create_stream(INTERNAL_SCOPE, "mine", StreamConfig(ScalingPolicy.fixed(1)))
    stored = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=system))
    assert sorted(s.stream for s in stored.streams) == ["_MARKmine", "mine"]
