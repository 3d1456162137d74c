"""The operator commands' failures that are not about a resource: an unreachable controller (named
in the one line), a malformed address, and with --auth-enabled wrong credentials refused, an
account without the right refused, and the right credentials working, from either environment
variable family (ours or Pravega's client's). Credentials never appear on stdout or stderr."""

from __future__ import annotations

import asyncio

from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.testing.ports import free_port
from tests.admin_cli.conftest import Served, pgcontroller


async def test_an_unreachable_controller_is_named_in_one_line() -> None:
    grpc = f"tcp://127.0.0.1:{free_port()}"
    rest = f"http://127.0.0.1:{free_port()}"
    results = await asyncio.gather(
        pgcontroller("scope", "list", "--controller", grpc),
        pgcontroller("stream", "info", "sc/s", env={"PGCONTROLLER_CONTROLLER_URI": grpc}),
        pgcontroller("readergroup", "list", "sc", "--rest-url", rest),
        pgcontroller("scope", "list", "--controller", "nonsense"),
    )
    for result in results[:3]:
        assert (result.code, result.out) == (1, ""), result
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert results[0].err.startswith(f"pgcontroller: cannot reach the controller at {grpc} (")
    assert results[1].err.startswith(f"pgcontroller: cannot reach the controller at {grpc} (")
    assert results[2].err.startswith(f"pgcontroller: cannot reach the controller's REST API at {rest} (")
    assert (results[3].code, results[3].err) == (
        2,
        "pgcontroller: --controller: a controller address is host:port, not 'nonsense'\n",
    )


async def test_with_auth_enabled_only_the_right_credentials_work(secured: Served) -> None:
    accounts = PgAccountStore(secured.services.resources.pool)
    await accounts.add("admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1)
    await accounts.add("reader", hash_password("reader-pw"), "prn::*,READ", 1)
    admin = {"PGCONTROLLER_USERNAME": "admin", "PGCONTROLLER_PASSWORD": "admin-pw"}
    pravega_admin = {
        "pravega_client_auth_method": "Basic",
        "pravega_client_auth_username": "admin",
        "pravega_client_auth_password": "admin-pw",
    }
    wrong = {"PGCONTROLLER_USERNAME": "admin", "PGCONTROLLER_PASSWORD": "not-the-password"}
    reader = {"PGCONTROLLER_USERNAME": "reader", "PGCONTROLLER_PASSWORD": "reader-pw"}

    created = await secured.run("scope", "create", "sec", env=admin)
    assert (created.code, created.out) == (0, "scope sec created\n"), created
    made = await secured.run("stream", "create", "sec/s", env=pravega_admin)
    assert made.code == 0, made
    listed = await secured.run("readergroup", "list", "sec", env=pravega_admin)
    assert (listed.code, listed.out) == (0, "READER GROUP\n"), listed

    refused = await asyncio.gather(
        secured.run("scope", "list"),
        secured.run("scope", "list", env=wrong),
        secured.run("readergroup", "list", "sec", env=wrong),
        secured.run("stream", "seal", "sec/s", env=reader),
        secured.run("request", "list", env=wrong),
    )
    for result in refused:
        assert (result.code, result.out) == (1, ""), result
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
        assert "not-the-password" not in result.err and "reader-pw" not in result.err
    nobody, bad, bad_rest, denied, bad_request = (r.err for r in refused)
    assert nobody.startswith(
        f"pgcontroller: list scopes: the controller at {secured.controller} refused the "
        "credentials (UNAUTHENTICATED)"
    )
    assert "set PGCONTROLLER_USERNAME and PGCONTROLLER_PASSWORD" in nobody
    assert bad.startswith("pgcontroller: list scopes: the controller at ") and "(UNAUTHENTICATED)" in bad
    assert (
        bad_rest.startswith("pgcontroller: list reader groups of scope sec: the controller at ")
        and "(401)" in bad_rest
    )
    assert denied.startswith("pgcontroller: seal stream sec/s: not allowed (PERMISSION_DENIED)"), denied
    assert "401" in bad_request, bad_request

    read = await secured.run("stream", "list", "sec", env=reader)
    assert (read.code, read.out) == (0, "STREAM\ns\n"), read
    assert await secured.services.streams.stream_exists("sec", "s")
