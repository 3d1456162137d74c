"""Authorization with `--auth-enabled` over real gRPC and HTTP: per resource and permission, the
calls Pravega allows and refuses (PERMISSION_DENIED / 403 with a JSON body), listings filtered to
what the caller may read, the root resource for the cluster routes; and every RPC and every route
has a row in the authorization tables."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc import auth as grpc_auth
from app.api.grpc.proto import controller_pb2 as pb
from app.api.rest import auth as rest_auth
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.services.health import HealthService
from app.wiring import rest_extensions
from tests.api.test_grpc_streams import config
from tests.security.conftest import ADMIN, Secured

READER_ACL = "prn::/,READ;prn::/scope:s1,READ;prn::/scope:s1/stream:a,READ"
WRITER_ACL = "prn::/scope:s1,READ_UPDATE;prn::/scope:s1/*,READ_UPDATE"


def _md(authorization: str) -> dict[str, str]:
    return {"authorization": authorization}


async def _status(call: Any, request: Any, authorization: str) -> Status:
    try:
        await call(request, metadata=_md(authorization))
    except GRPCError as exc:
        if exc.status is Status.PERMISSION_DENIED:
            assert exc.message and "not allowed" in exc.message
        return exc.status
    return Status.OK


async def _world(secured: Secured) -> str:
    """Scopes s1, s2, s3; streams s1/a, s1/b; returns the admin credential."""
    admin = await secured.add_user(*ADMIN)
    stub = secured.stub
    for scope in ("s1", "s2", "s3"):
        await stub.createScope(pb.ScopeInfo(scope=scope), metadata=_md(admin))
    for stream in ("a", "b"):
        created = await stub.createStream(config("s1", stream), metadata=_md(admin))
        assert created.status == pb.CreateStreamStatus.SUCCESS
    return admin


async def test_grpc_per_resource_and_permission(secured: Secured) -> None:
    await _world(secured)
    reader = await secured.add_user("reader", "r-pw", READER_ACL)
    writer = await secured.add_user("writer", "w-pw", WRITER_ACL)
    stub = secured.stub
    a = pb.StreamInfo(scope="s1", stream="a")
    b = pb.StreamInfo(scope="s1", stream="b")
    # the root resource: only READ_UPDATE on prn::/ creates or deletes scopes
    assert await _status(stub.createScope, pb.ScopeInfo(scope="x"), reader) is Status.PERMISSION_DENIED
    assert await _status(stub.createScope, pb.ScopeInfo(scope="x"), writer) is Status.PERMISSION_DENIED
    assert await _status(stub.deleteScope, pb.ScopeInfo(scope="s3"), writer) is Status.PERMISSION_DENIED
    # reads need READ on the stream
    assert await _status(stub.getStreamConfiguration, a, reader) is Status.OK
    assert await _status(stub.getStreamConfiguration, b, reader) is Status.PERMISSION_DENIED
    assert await _status(stub.checkScopeExists, pb.ScopeInfo(scope="s1"), reader) is Status.OK
    assert await _status(stub.checkScopeExists, pb.ScopeInfo(scope="s2"), reader) is Status.PERMISSION_DENIED
    # getCurrentSegments: READ when no token is asked for, READ_UPDATE otherwise (older clients)
    no_token = pb.StreamInfo(scope="s1", stream="a", accessOperation=pb.StreamInfo.AccessOperation.NONE)
    assert await _status(stub.getCurrentSegments, no_token, reader) is Status.OK
    assert await _status(stub.getCurrentSegments, a, reader) is Status.PERMISSION_DENIED
    assert await _status(stub.getCurrentSegments, a, writer) is Status.OK
    # writes need READ_UPDATE
    assert await _status(stub.sealStream, a, reader) is Status.PERMISSION_DENIED
    assert await _status(stub.createStream, config("s1", "c"), reader) is Status.PERMISSION_DENIED
    assert await _status(stub.createStream, config("s1", "c"), writer) is Status.OK
    assert await _status(stub.createStream, config("s2", "c"), writer) is Status.PERMISSION_DENIED
    assert await _status(stub.sealStream, b, writer) is Status.OK
    # the cluster's bucket map needs the root resource with READ_UPDATE
    mapping = pb.ControllerToBucketMappingRequest()
    assert await _status(stub.getControllerToBucketMapping, mapping, writer) is Status.PERMISSION_DENIED


async def test_grpc_listings_show_only_what_the_caller_may_read(secured: Secured) -> None:
    admin = await _world(secured)
    reader = await secured.add_user("reader", "r-pw", READER_ACL + ";prn::/scope:s3,READ")
    stub = secured.stub
    scopes = await stub.listScopes(pb.ScopesRequest(), metadata=_md(reader))
    assert sorted(scopes.scopes) == ["s1", "s3"]  # `_system` too is a scope the reader may not read
    every = await stub.listScopes(pb.ScopesRequest(), metadata=_md(admin))
    assert list(every.scopes) == ["s1", "s2", "s3", "_system"]
    listed = await stub.listStreamsInScope(
        pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="s1")), metadata=_md(reader)
    )
    assert [s.stream for s in listed.streams] == ["a"]
    # A page hidden entirely is fetched past: the next page is not mistaken for the end.
    hidden = await secured.add_user("hidden", "h-pw", "prn::/scope:s1,READ;prn::/scope:s1/stream:b,READ")
    names: list[str] = []
    token = ""
    for _ in range(10):
        page = await stub.listStreamsInScope(
            pb.StreamsInScopeRequest(
                scope=pb.ScopeInfo(scope="s1"), continuationToken=pb.ContinuationToken(token=token)
            ),
            metadata=_md(hidden),
        )
        if not page.streams:
            break
        names += [s.stream for s in page.streams]
        token = page.continuationToken.token
    assert names == ["b"]
    assert await _status(stub.listScopes, pb.ScopesRequest(), hidden) is Status.PERMISSION_DENIED


async def _rest(
    http: aiohttp.ClientSession, method: str, path: str, who: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, headers={"Authorization": who}, json=body) as response:
        payload = await response.json() if response.content_type == "application/json" else None
        if response.status == 403:
            assert payload["code"] == 403 and "not allowed" in payload["message"]
        return response.status, payload


async def test_rest_per_resource_permission_and_listing(secured: Secured) -> None:
    await _world(secured)
    reader = await secured.add_user("reader", "r-pw", READER_ACL)
    writer = await secured.add_user("writer", "w-pw", WRITER_ACL)
    root = await secured.add_user("root", "root-pw", "prn::/,READ_UPDATE")
    async with aiohttp.ClientSession(secured.rest_base) as http:
        assert (await _rest(http, "POST", "/v1/scopes", reader, {"scopeName": "x"}))[0] == 403
        assert (await _rest(http, "POST", "/v1/scopes", root, {"scopeName": "x"}))[0] == 201
        status, listing = await _rest(http, "GET", "/v1/scopes", reader)
        assert status == 200 and [s["scopeName"] for s in listing["scopes"]] == ["s1"]
        status, listing = await _rest(http, "GET", "/v1/scopes/s1/streams", reader)
        assert status == 200 and [s["streamName"] for s in listing["streams"]] == ["a"]
        assert (await _rest(http, "GET", "/v1/scopes/s1/streams/a", reader))[0] == 200
        assert (await _rest(http, "GET", "/v1/scopes/s1/streams/b", reader))[0] == 403
        assert (await _rest(http, "GET", "/v1/scopes/s2", reader))[0] == 403
        assert (await _rest(http, "DELETE", "/v1/scopes/s1/streams/a", reader))[0] == 403
        assert (await _rest(http, "PUT", "/v1/scopes/s1/streams/a/state", writer, {"streamState": "SEALED"}))[
            0
        ] == 200
        assert (await _rest(http, "DELETE", "/v1/scopes/s1/streams/a", writer))[0] == 204
        # registration of segment stores steers getURI: only the root resource with READ_UPDATE
        store = {"host": "127.0.0.1", "port": 1}
        assert (await _rest(http, "POST", "/v1/cluster/segment-stores", writer, store))[0] == 403
        assert (await _rest(http, "GET", "/v1/cluster/segment-stores", reader))[0] == 200
        assert (await _rest(http, "POST", "/v1/cluster/segment-stores", reader, store))[0] == 403
        assert (await _rest(http, "POST", "/v1/cluster/segment-stores", root, store))[0] not in (401, 403)
        report = "/v1/scopes/s1/streams/b/scale-reports"
        assert (await _rest(http, "POST", report, writer, {}))[0] == 403


def test_every_rpc_has_an_authorization_rule() -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["ControllerService"].methods}
    assert set(grpc_auth.RULES) == methods
    assert len(methods) == 47


async def test_every_route_has_an_authorization_rule(secured: Secured) -> None:
    """The routes of the app `serve` runs, extensions included."""
    missing = []
    runner = secured.services  # the served app is rebuilt here as start_servers builds it
    app = create_app(
        runner.scopes,
        runner.streams,
        HealthService(SystemClock()),
        runner.lifecycle,
        runner.transactions,
        rest_extensions(runner.controller),
    )
    assert len(app.router.routes()) > 30
    for route in app.router.routes():
        pattern = route.resource.canonical if route.resource is not None else ""
        if (
            route.method == "HEAD"
            or pattern.startswith(rest_auth.OPEN_PREFIXES)
            or pattern in rest_auth.OPEN_PATHS
        ):
            continue
        if rest_auth.rule_for(route.method, pattern) is None:
            missing.append(f"{route.method} {pattern}")
    assert not missing
    assert rest_auth.rule_for("POST", "/v1/cluster/segment-stores") is not None


def _all_methods() -> list[tuple[str, Any]]:
    service = pb.DESCRIPTOR.services_by_name["ControllerService"]
    return [(m.name, getattr(pb, m.input_type.name)) for m in service.methods]


async def test_every_rpc_is_enforced_on_the_wire(secured: Secured) -> None:
    """An account with an empty ACL is refused on every RPC but the open one; an account with
    `prn::*,READ_UPDATE` is refused on none (whatever else the empty request earns it)."""
    nobody = await secured.add_user("nobody", "n-pw", "")
    admin = await secured.add_user(*ADMIN)
    channel = secured.channel
    wrong: list[str] = []
    for name, request_type in _all_methods():
        path = f"/io.pravega.controller.stream.api.grpc.v1.ControllerService/{name}"
        method = getattr(secured.stub, name)
        assert method.name == path
        denied = await _status(method, request_type(), nobody)
        expected = Status.OK if name == "getControllerServerList" else Status.PERMISSION_DENIED
        if denied is not expected:
            wrong.append(f"{name}: {denied.name} for an empty ACL")
        allowed = await _status(method, request_type(), admin)
        if allowed in (Status.PERMISSION_DENIED, Status.UNAUTHENTICATED):
            wrong.append(f"{name}: {allowed.name} for prn::*")
    assert channel is not None and not wrong


async def test_every_route_is_enforced_on_the_wire(secured: Secured) -> None:
    """Every route but health and the OpenAPI document: 401 without credentials, 403 for an empty
    ACL, neither for `prn::*`."""
    await secured.add_user(*ADMIN)
    nobody = await secured.add_user("nobody", "n-pw", "")
    admin = await secured.add_user("root", "root-pw", "prn::*,READ_UPDATE")
    app = create_app(
        secured.services.scopes,
        secured.services.streams,
        HealthService(SystemClock()),
        secured.services.lifecycle,
        secured.services.transactions,
        rest_extensions(secured.services.controller),
    )
    wrong: list[str] = []
    checked = 0
    async with aiohttp.ClientSession(secured.rest_base) as http:
        for route in app.router.routes():
            pattern = route.resource.canonical if route.resource is not None else ""
            if (
                route.method == "HEAD"
                or pattern.startswith(rest_auth.OPEN_PREFIXES)
                or pattern in rest_auth.OPEN_PATHS
            ):
                continue
            path = re.sub(r"\{[^}]+\}", "x1", pattern)
            body = None if route.method in ("GET", "DELETE") else {}
            for who, refused in (("", 401), (nobody, 403), (admin, None)):
                headers = {"Authorization": who} if who else {}
                async with http.request(route.method, path, headers=headers, json=body) as response:
                    status = response.status
                if (refused is not None and status != refused) or (refused is None and status in (401, 403)):
                    wrong.append(f"{route.method} {pattern}: {status} for {who[:12] or 'no credentials'}")
            checked += 1
    assert checked > 30 and not wrong
