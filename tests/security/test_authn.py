"""Authentication with `--auth-enabled` over real gRPC and HTTP: missing, wrong and unknown-method
credentials are refused (UNAUTHENTICATED, 401 with WWW-Authenticate); health stays open; the
cache of verified credentials trusts a credential only until the account's version changes."""

from __future__ import annotations

import aiohttp
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.clock import SystemClock
from app.security.authn import AuthenticationFailed, Authenticator
from app.security.passwords import hash_password, pravega_digest
from app.store.accounts import PgAccountStore
from app.testing.controller import Services
from tests.security.conftest import ADMIN, Secured, basic


async def _grpc_status(secured: Secured, authorization: str | None) -> Status:
    metadata = None if authorization is None else {"authorization": authorization}
    try:
        await secured.stub.createScope(pb.ScopeInfo(scope="s1"), metadata=metadata)
    except GRPCError as exc:
        assert exc.message is None or "pw" not in exc.message
        return exc.status
    return Status.OK


async def test_grpc_refuses_missing_wrong_and_unknown_credentials(secured: Secured) -> None:
    admin = await secured.add_user(*ADMIN)
    assert await _grpc_status(secured, None) is Status.UNAUTHENTICATED
    assert await _grpc_status(secured, basic("admin", "wrong-pw")) is Status.UNAUTHENTICATED
    assert await _grpc_status(secured, basic("nobody", "admin-pw")) is Status.UNAUTHENTICATED
    assert await _grpc_status(secured, "Bearer abc.def") is Status.UNAUTHENTICATED
    assert await _grpc_status(secured, "Basic !!!not-base64") is Status.UNAUTHENTICATED
    assert await _grpc_status(secured, admin) is Status.OK
    # Pravega leaves getControllerServerList open, but refuses wrong credentials on any call.
    await secured.stub.getControllerServerList(pb.ServerRequest())
    with pytest.raises(GRPCError) as refused:
        await secured.stub.getControllerServerList(
            pb.ServerRequest(), metadata={"authorization": basic("admin", "nope")}
        )
    assert refused.value.status is Status.UNAUTHENTICATED


async def test_rest_answers_401_with_www_authenticate_and_keeps_health_open(secured: Secured) -> None:
    admin = await secured.add_user(*ADMIN)
    async with aiohttp.ClientSession(secured.rest_base) as http:
        for headers in ({}, {"Authorization": basic("admin", "bad")}, {"Authorization": "Negotiate xyz"}):
            async with http.get("/v1/scopes", headers=headers) as response:
                assert response.status == 401
                assert response.headers["WWW-Authenticate"] == 'Basic realm="pgcontroller"'
                body = await response.json()
                assert body["code"] == 401 and "bad" not in body["message"]
        async with http.get("/v1/scopes", headers={"Authorization": admin}) as response:
            assert response.status == 200
        for path in ("/v1/health", "/v1/health/readiness", "/v1/health/liveness", "/v1/openapi.json"):
            async with http.get(path) as response:
                assert response.status != 401, path


async def test_auth_off_by_default_accepts_anything(services: Services) -> None:
    from app.testing.controller import serving

    async with serving(services) as servers, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{servers.rest_port}/v1/scopes"
        async with http.get(url, headers={"Authorization": "Basic Ym9ndXM6Ym9ndXM="}) as response:
            assert response.status == 200


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_cache_trusts_until_ttl_then_rechecks_the_version(services: Services) -> None:
    store = PgAccountStore(services.resources.pool)
    await store.add("u", hash_password("pw1"), "prn::/,READ", 1)
    clock = FakeMonotonic()
    auth = Authenticator(store, SystemClock().now_ms, ttl_s=5.0, monotonic=clock)
    header = basic("u", "pw1")
    assert (await auth.authenticate(header)).name == "u"
    assert (await auth.authenticate(header)).acl_text == "prn::/,READ"
    assert auth.verifications == 1
    clock.now = 6.0  # past the TTL, same version: re-read, not re-verified
    await auth.authenticate(header)
    assert auth.verifications == 1
    current = await store.get("u")
    assert current is not None
    await store.update("u", current.version, 2, password_hash=hash_password("pw2"), acl="prn::*,READ")
    clock.now = 12.0
    with pytest.raises(AuthenticationFailed):
        await auth.authenticate(header)  # the old password no longer logs in
    assert (await auth.authenticate(basic("u", "pw2"))).acl_text == "prn::*,READ"
    current = await store.get("u")
    assert current is not None
    await store.remove("u", current.version)
    clock.now = 20.0
    with pytest.raises(AuthenticationFailed):
        await auth.authenticate(basic("u", "pw2"))


async def test_an_imported_pravega_digest_logs_in_and_is_rehashed_to_argon2id(services: Services) -> None:
    store = PgAccountStore(services.resources.pool)
    await store.add("old", pravega_digest("legacy-pw", b"\x01" * 32), "prn::*,READ", 1)
    auth = Authenticator(store, SystemClock().now_ms)
    with pytest.raises(AuthenticationFailed):
        await auth.authenticate(basic("old", "not-it"))
    before = await store.get("old")
    assert (await auth.authenticate(basic("old", "legacy-pw"))).name == "old"
    after = await store.get("old")
    assert before is not None and after is not None
    assert after.password_hash.startswith("$argon2id$") and after.version == before.version + 1
    fresh = Authenticator(store, SystemClock().now_ms)
    assert (await fresh.authenticate(basic("old", "legacy-pw"))).name == "old"
