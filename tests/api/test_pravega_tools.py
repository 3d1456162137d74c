"""Pravega's own tools against a served controller, making exactly the REST calls their sources
make: the admin CLI's controller commands and the Pravega operator's probes; and the leniencies
they rely on (a trailing slash, HEAD) on every GET route, `/ping`, and `_system`."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.records import ScalingPolicy, StreamConfig
from app.testing.controller import Services, serving
from tests.security.conftest import basic
from tests.support.readergroups import rg_config, stream_cut

SC = "tools"
JSON = {"accept": "application/json"}
# Values for the path parameters of any route: the scope, stream and reader group made below.
_PARAMS = {"scopeName": SC, "streamName": "s1", "readerGroupName": "rg", "port": "1"}


@pytest.fixture
async def rest(services: Services) -> AsyncIterator[tuple[aiohttp.ClientSession, list[str]]]:
    """A served controller (auth off) holding scope `tools`, stream `s1` and reader group `rg`;
    the session and the GET route patterns the served app has."""
    await services.scopes.create_scope(SC)
    await services.streams.create_stream(SC, "s1", StreamConfig(ScalingPolicy.fixed(1)))
    async with serving(services) as servers:
        channel = Channel("127.0.0.1", servers.grpc_port)
        try:
            reply = await ControllerServiceStub(channel).createReaderGroup(
                rg_config(SC, "rg", [stream_cut(SC, "s1")])
            )
            assert reply.status == pb.CreateReaderGroupResponse.SUCCESS
        finally:
            channel.close()
        app = servers.rest_runner.app
        gets = sorted(
            {
                route.resource.canonical
                for route in app.router.routes()
                if route.method == "GET" and route.resource is not None
            }
        )
        async with aiohttp.ClientSession(f"http://127.0.0.1:{servers.rest_port}") as http:
            yield http, gets


async def _get(http: aiohttp.ClientSession, path: str) -> tuple[int, bytes]:
    async with http.get(path, headers=JSON) as response:
        return response.status, await response.read()


async def test_admin_cli_controller_commands(rest: tuple[aiohttp.ClientSession, list[str]]) -> None:
    """The paths of pravega/cli/admin/src/main/java/io/pravega/cli/admin/controller/Controller*Command.java
    (list-scopes, describe-scope, list-streams, describe-stream, list-readergroups,
    describe-readergroup, delete-readergroup); the CLI reports success on 200 or 204
    (ControllerCommand.printResponseInfo)."""
    http, _ = rest
    status, body = await _get(http, "/v1/scopes/")
    assert status == 200 and b'"tools"' in body and b'"_system"' in body
    for path in (
        f"/v1/scopes/{SC}",
        f"/v1/scopes/{SC}/streams",
        f"/v1/scopes/{SC}/streams/s1",
        f"/v1/scopes/{SC}/readergroups",
        f"/v1/scopes/{SC}/readergroups/rg",
    ):
        assert (await _get(http, path))[0] == 200, path
    async with http.delete(f"/v1/scopes/{SC}/readergroups/rg") as response:
        assert response.status == 204
    assert (await _get(http, f"/v1/scopes/{SC}/readergroups/rg"))[0] == 404


async def test_operator_probes(rest: tuple[aiohttp.ClientSession, list[str]]) -> None:
    """pravega-operator pkg/util/pravegacluster.go: HealthcheckCommand (liveness) and
    ControllerReadinessCheck (readiness; for versions before its health-check version it greps
    `GET /v1/scopes/` for `_system`). Its curl treats any answer as success, so the verdict is in
    the body."""
    http, _ = rest
    for path in ("/v1/health/liveness", "/v1/health/readiness"):
        status, body = await _get(http, path)
        assert status == 200 and body in (b"true", b"false"), (path, body)
    status, body = await _get(http, "/v1/scopes/")
    assert status == 200 and b"_system" in body


async def test_operator_auth_probe_gets_401(services: Services) -> None:
    """ControllerReadinessCheck with auth: `curl -u testtls:testtls GET /v1/scopes/ | grep 401`."""
    async with (
        serving(services, auth_enabled=True) as servers,
        aiohttp.ClientSession(f"http://127.0.0.1:{servers.rest_port}") as http,
        http.get("/v1/scopes/", headers={**JSON, "authorization": basic("testtls", "testtls")}) as response,
    ):
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Basic")
    async with (
        serving(services, auth_enabled=True) as servers,
        aiohttp.ClientSession(f"http://127.0.0.1:{servers.rest_port}") as http,
    ):
        # Open without credentials, as Pravega's are.
        for path in ("/ping", "/v1/health/readiness/", "/v1/openapi.json/"):
            async with http.get(path) as response:
                assert response.status == 200, path
            async with http.head(path) as response:
                assert response.status == 200, path


async def test_ping(rest: tuple[aiohttp.ClientSession, list[str]]) -> None:
    http, _ = rest
    assert await _get(http, "/ping") == (200, b"")
    async with http.head("/ping/") as response:
        assert response.status == 200
    async with http.post("/ping") as response:
        assert response.status == 405 and response.headers["Allow"] == "GET"


def _filled(pattern: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: _PARAMS.get(m.group(1), "x"), pattern)


async def test_every_get_route_takes_a_trailing_slash_and_head(
    rest: tuple[aiohttp.ClientSession, list[str]],
) -> None:
    http, gets = rest
    assert len(gets) > 20 and "/v1/scopes" in gets and "/ping" in gets
    for pattern in gets:
        path = _filled(pattern)
        status, _ = await _get(http, path)
        assert status != 404 or "{" in pattern, path  # a parameterless route is always there
        slashed = await _get(http, path + "/")
        assert slashed[0] == status, (path, slashed)
        async with http.head(path, headers=JSON) as response:
            assert response.status == status, path
            assert await response.read() == b""
        async with http.head(path + "//", headers=JSON) as response:
            assert response.status == status, path


async def test_trailing_slash_keeps_the_other_methods_and_404(
    rest: tuple[aiohttp.ClientSession, list[str]],
) -> None:
    http, _ = rest
    async with http.post("/v1/scopes/", json={"scopeName": "made"}) as response:
        assert response.status == 201
    async with http.delete("/v1/scopes/made/") as response:
        assert response.status == 204
    async with http.patch("/v1/scopes/") as response:
        assert response.status == 405
    for path in ("/v1/nothing/", "/v1/scopes/tools/streams/s1/nothing/", "/nothing/"):
        async with http.get(path) as response:
            assert response.status == 404, path
            assert (await response.json())["code"] == 404
    async with http.get("/v1/scopes/?limit=1") as response:
        assert (await response.json())["scopes"] == [{"scopeName": "_system"}]


async def test_system_scope_listed_and_refused(rest: tuple[aiohttp.ClientSession, list[str]]) -> None:
    """As Pravega: `_system` always listed and found; its name and its streams refused over REST."""
    http, _ = rest
    status, body = await _get(http, "/v1/scopes")
    assert status == 200 and body.startswith(b'{"scopes": [{"scopeName": "_system"}')
    assert (await _get(http, "/v1/scopes/_system"))[0] == 200
    assert (await _get(http, "/v1/scopes/_system/streams"))[0] == 200
    refused = [
        ("POST", "/v1/scopes", {"scopeName": "_system"}),
        ("DELETE", "/v1/scopes/_system", None),
        (
            "POST",
            "/v1/scopes/_system/streams",
            {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}},
        ),
        (
            "PUT",
            "/v1/scopes/_system/streams/_requeststream",
            {"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}},
        ),
        ("PUT", "/v1/scopes/_system/streams/_requeststream/state", {"streamState": "SEALED"}),
        ("DELETE", "/v1/scopes/_system/streams/_requeststream", None),
    ]
    for method, path, body_json in refused:
        async with http.request(method, path, json=body_json) as response:
            answer = await response.json()
            assert response.status == 400, (method, path, answer)
            assert "_system" in answer["message"], answer


async def test_system_scope_paged_listing_is_the_unpaged_one(
    rest: tuple[aiohttp.ClientSession, list[str]], services: Services
) -> None:
    http, _ = rest
    for name in ("a1", "b2", "c3"):
        await services.scopes.create_scope(name)
    await _walks_every_page(http, 5)
    await services.scopes.create_scope("_system")  # gRPC accepts it, as Pravega's controller does
    await _walks_every_page(http, 5)  # `_system` (listed once), tools, a1, b2, c3


async def _walks_every_page(http: aiohttp.ClientSession, count: int) -> None:
    async with http.get("/v1/scopes") as response:
        every = [s["scopeName"] for s in (await response.json())["scopes"]]
    assert every[0] == "_system" and every.count("_system") == 1 and len(every) == count, every
    for limit in (1, 2, count, count + 1):
        walked: list[str] = []
        params = {"limit": str(limit)}
        for _ in range(2 * count + 2):
            async with http.get("/v1/scopes", params=params) as response:
                page = await response.json()
            walked += [s["scopeName"] for s in page["scopes"]]
            assert len(page["scopes"]) <= limit, page
            if "continuationToken" not in page:
                break
            params = {"limit": str(limit), "continuationToken": page["continuationToken"]}
        assert walked == every, limit
