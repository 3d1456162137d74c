"""Auth handler plugins (`--auth-handlers`, entry points): a `Bearer` plugin from tests/ served
beside Basic over real gRPC and REST, each call authorized by the handler that authenticated it
(delegation tokens too); unknown methods refused naming the supported ones; a plugin that cannot
load stops start-up in one line; only a plugin named in the setting may take the method Basic."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import jwt
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.cli import main
from app.security.authn import BASIC
from app.security.passwords import hash_password
from app.security.plugins import ENTRY_POINT_GROUP, check_handlers, installed_entry_points, load_handlers
from app.security.tokens import stream_resource
from app.settings import SettingError, Settings
from app.store.accounts import PgAccountStore
from app.testing.controller import running_controller, serving
from tests.api.test_grpc_streams import config
from tests.security import bearer_plugin

PLUGIN = "tests.security.bearer_plugin:make"
CRASHY = "tests.security.bearer_plugin:crashy"
KEY = b"the plugin tests' delegation-token signing key, long enough, and never logged anywhere"
ADMIN = {"authorization": "Basic " + base64.b64encode(b"admin:admin-pw").decode()}
READER = {"authorization": "Bearer reader-token"}
WRITER = {"authorization": "Bearer writer-token"}
Access = pb.StreamInfo.AccessOperation


@dataclass
class Served:
    stub: ControllerServiceStub
    rest_base: str
    handler: bearer_plugin.BearerHandler


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    """`serve`'s wiring with auth on and the Bearer plugin; scopes sc and other, stream sc/s."""
    async with running_controller(db_url, auth_enabled=True, token_signing_key=KEY) as services:
        await PgAccountStore(services.resources.pool).add(
            "admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1
        )
        before = len(bearer_plugin.made)
        async with serving(services, auth_enabled=True, auth_handlers=(PLUGIN, CRASHY)) as servers:
            assert len(bearer_plugin.made) == before + 1  # one handler per process
            channel = Channel("127.0.0.1", servers.grpc_port)
            stub = ControllerServiceStub(channel)
            try:
                for scope in ("sc", "other"):
                    await stub.createScope(pb.ScopeInfo(scope=scope), metadata=ADMIN)
                made = await stub.createStream(config("sc", "s", 1), metadata=ADMIN)
                assert made.status == pb.CreateStreamStatus.SUCCESS
                yield Served(stub, f"http://127.0.0.1:{servers.rest_port}", bearer_plugin.made[-1])
            finally:
                channel.close()


async def _status(call: object) -> tuple[Status, str]:
    try:
        await call  # type: ignore[misc]
    except GRPCError as exc:
        return exc.status, exc.message or ""
    return Status.OK, ""


async def test_grpc_calls_are_authorized_by_the_plugin_that_authenticated_them(served: Served) -> None:
    stub = served.stub
    scope_sc, scope_other = pb.ScopeInfo(scope="sc"), pb.ScopeInfo(scope="other")
    assert (await _status(stub.checkScopeExists(scope_sc, metadata=READER)))[0] is Status.OK
    status, message = await _status(stub.checkScopeExists(scope_other, metadata=READER))
    assert status is Status.PERMISSION_DENIED and "bearer-reader" in message
    # READ on the scope is not READ_UPDATE: the reader may not create a stream, the writer may.
    refused = await _status(stub.createStream(config("sc", "r", 1), metadata=READER))
    assert refused[0] is Status.PERMISSION_DENIED
    assert (
        await stub.createStream(config("sc", "w", 1), metadata=WRITER)
    ).status == pb.CreateStreamStatus.SUCCESS
    assert ("bearer-writer", "prn::/scope:sc") in served.handler.asked
    # Basic still works beside the plugin, through the accounts.
    assert (await _status(stub.checkScopeExists(scope_other, metadata=ADMIN)))[0] is Status.OK
    assert not [asked for asked in served.handler.asked if asked[0] == "admin"]
    # Listings are filtered by the plugin too: the reader sees sc's streams only through READ on sc.
    listed = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=scope_sc), metadata=READER)
    assert {s.stream for s in listed.streams} >= {"s", "w"}


async def test_grpc_refuses_unknown_tokens_and_methods_naming_the_supported_ones(served: Served) -> None:
    scope = pb.ScopeInfo(scope="sc")
    status, message = await _status(
        served.stub.checkScopeExists(scope, metadata={"authorization": "Bearer nope"})
    )
    assert status is Status.UNAUTHENTICATED and "nope" not in message
    status, message = await _status(
        served.stub.checkScopeExists(scope, metadata={"authorization": "Negotiate abc"})
    )
    assert status is Status.UNAUTHENTICATED
    assert "supported: Basic, Bearer, Crashy" in message
    status, message = await _status(served.stub.checkScopeExists(scope))
    assert status is Status.UNAUTHENTICATED and "Bearer" in message


async def test_rest_routes_follow_the_plugin_and_401_lists_every_method(served: Served) -> None:
    async with aiohttp.ClientSession(served.rest_base) as http:
        async with http.get("/v1/scopes/sc", headers={"Authorization": READER["authorization"]}) as r:
            assert r.status == 200
        async with http.get("/v1/scopes/other", headers={"Authorization": READER["authorization"]}) as r:
            assert r.status == 403
            assert "bearer-reader" in (await r.json())["message"]
        body = {"streamName": "viarest", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}}
        async with http.post(
            "/v1/scopes/sc/streams", json=body, headers={"Authorization": "Bearer reader-token"}
        ) as r:
            assert r.status == 403
        async with http.post(
            "/v1/scopes/sc/streams", json=body, headers={"Authorization": "Bearer writer-token"}
        ) as r:
            assert r.status == 201
        for value in ("Bearer nope", "Negotiate abc", None):
            headers = {} if value is None else {"Authorization": value}
            async with http.get("/v1/scopes/sc", headers=headers) as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"] == (
                    'Basic realm="pgcontroller", Bearer realm="pgcontroller", Crashy realm="pgcontroller"'
                )
                assert "nope" not in (await r.json())["message"]


def _grants(token: str) -> dict[str, str]:
    claims = jwt.decode(token, KEY, algorithms=["HS512"], audience="segmentstore")
    return {k: v for k, v in claims.items() if k.startswith("prn::")}


async def test_delegation_tokens_carry_what_the_plugin_authorizes(served: Served) -> None:
    def info(access: int) -> pb.StreamInfo:
        return pb.StreamInfo(scope="sc", stream="s", accessOperation=access)

    read = await served.stub.getDelegationToken(info(Access.READ), metadata=READER)
    assert _grants(read.delegationToken) == {stream_resource("sc", "s"): "READ"}
    assert ("bearer-reader", "prn::/scope:sc/stream:s") in served.handler.asked
    status, _ = await _status(served.stub.getDelegationToken(info(Access.WRITE), metadata=READER))
    assert status is Status.PERMISSION_DENIED
    write = await served.stub.getDelegationToken(info(Access.READ_WRITE), metadata=WRITER)
    assert _grants(write.delegationToken) == {stream_resource("sc", "s"): "READ_UPDATE"}


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("nosuch_plugin_module:make", "cannot import 'nosuch_plugin_module' (ModuleNotFoundError"),
        ("tests.security.bearer_plugin:absent", "'tests.security.bearer_plugin' has no attribute 'absent'"),
        ("tests.security.bearer_plugin:NOT_CALLABLE", "is not callable"),
        ("not a spec", "must be a comma-separated list of module:attribute"),
    ],
)
def test_a_plugin_that_cannot_be_imported_stops_serve_in_one_line(
    capsys: pytest.CaptureFixture[str], spec: str, said: str
) -> None:
    assert main(["serve", "--auth-enabled", "--auth-handlers", spec]) == 2
    err = capsys.readouterr().err
    assert "--auth-handlers" in err and said in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("attribute", "said"),
    [
        ("failing", "failed to initialize (RuntimeError: the token table is unreachable)"),
        ("not_a_handler", "did not return an auth handler"),
    ],
)
def test_a_plugin_whose_factory_fails_is_a_setting_error(attribute: str, said: str) -> None:
    settings = Settings(auth_enabled=True, auth_handlers=(f"tests.security.bearer_plugin:{attribute}",))
    check_handlers(settings)  # importable: only calling the factory tells
    with pytest.raises(SettingError, match="--auth-handlers") as refused:
        load_handlers(settings, entry_points=())
    assert said in str(refused.value)


def _install_entry_point(root: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    """A distribution declaring one entry point in ENTRY_POINT_GROUP, found on sys.path."""
    info = root / "pgc_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pgc-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {value}\n")
    monkeypatch.syspath_prepend(str(root))


def test_entry_points_are_loaded_but_may_not_take_basic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install_entry_point(tmp_path, monkeypatch, "bearer", PLUGIN)
    assert [entry.value for entry in installed_entry_points()] == [PLUGIN]
    handlers = load_handlers(Settings(auth_enabled=True))
    assert [handler.name for handler in handlers] == ["Bearer"]
    # The same method from the setting and an entry point: two handlers for one method.
    with pytest.raises(SettingError, match="both serve the method Bearer"):
        load_handlers(Settings(auth_enabled=True, auth_handlers=(PLUGIN,)))
    basic = "tests.security.bearer_plugin:make_basic"
    (tmp_path / "pgc_test_plugin-1.0.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nbasic = {basic}\n"
    )
    with pytest.raises(SettingError, match="claims the method Basic"):
        load_handlers(Settings(auth_enabled=True))
    # Named explicitly by the operator, a plugin may serve Basic instead of the accounts.
    replaced = load_handlers(Settings(auth_enabled=True, auth_handlers=(basic,)), entry_points=())
    assert [handler.name for handler in replaced] == [BASIC]


async def test_get_controller_server_list_stays_open_to_methods_no_handler_serves(served: Served) -> None:
    stub, request = served.stub, pb.ServerRequest()
    for metadata in (None, {"authorization": "Negotiate abc"}, {"authorization": "malformed"}, READER):
        await stub.getControllerServerList(request, metadata=metadata)
    # A served method's wrong token is refused even here, as the handler's interceptor refuses it.
    for wrong in ("Bearer nope", "Basic " + base64.b64encode(b"admin:wrong").decode()):
        status, _ = await _status(stub.getControllerServerList(request, metadata={"authorization": wrong}))
        assert status is Status.UNAUTHENTICATED


async def test_a_faulty_plugin_refuses_its_callers_and_never_crashes_a_call(served: Served) -> None:
    scope = pb.ScopeInfo(scope="sc")
    for token in ("boom", "odd"):
        status, message = await _status(
            served.stub.checkScopeExists(scope, metadata={"authorization": f"Crashy {token}"})
        )
        assert status is Status.UNAUTHENTICATED and "Crashy authentication failed" in message
    # Its authorize crashes: the principal is granted nothing, on gRPC and REST alike.
    status, _ = await _status(served.stub.checkScopeExists(scope, metadata={"authorization": "Crashy ok"}))
    assert status is Status.PERMISSION_DENIED
    async with aiohttp.ClientSession(served.rest_base) as http:
        for token, expected in (("boom", 401), ("odd", 401), ("ok", 403)):
            async with http.get("/v1/scopes/sc", headers={"Authorization": f"Crashy {token}"}) as r:
                assert r.status == expected
