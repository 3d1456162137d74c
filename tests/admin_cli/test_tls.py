"""The operator commands against a controller served over TLS (the certificates of
`pgcontroller dev certs`): `tls://` with the CA as --tls-trust-file works; another CA, a plain
connection and an unreadable trust file are each one line and exit code 1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.security.certs import make_dev_certs
from app.testing.controller import Services, serving
from tests.admin_cli.conftest import pgcontroller


@pytest.fixture
async def tls_port(services: Services, tmp_path: Path) -> AsyncIterator[tuple[int, Path, Path]]:
    certs = make_dev_certs(tmp_path / "certs")
    other = make_dev_certs(tmp_path / "other")
    async with serving(
        services, tls_enabled=True, tls_cert_file=certs.server_cert, tls_key_file=certs.server_key
    ) as servers:
        yield servers.grpc_port, certs.ca_cert, other.ca_cert


async def test_tls_with_the_right_ca_works_and_anything_else_is_one_line(
    tls_port: tuple[int, Path, Path], services: Services, tmp_path: Path
) -> None:
    port, ca, other_ca = tls_port
    uri = f"tls://127.0.0.1:{port}"
    created = await pgcontroller(
        "scope", "create", "secure", "--controller", uri, "--tls-trust-file", str(ca)
    )
    assert (created.code, created.out) == (0, "scope secure created\n"), created
    assert await services.scopes.scope_exists("secure")

    refused = await asyncio.gather(
        pgcontroller("scope", "list", "--controller", uri, "--tls-trust-file", str(other_ca)),
        pgcontroller("scope", "list", "--controller", f"tcp://127.0.0.1:{port}"),
        pgcontroller("scope", "list", "--controller", uri, "--tls-trust-file", str(tmp_path / "absent.pem")),
    )
    for result in refused:
        assert (result.code, result.out) == (1, ""), result
        assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    wrong_ca, plain, absent = (r.err for r in refused)
    assert wrong_ca.startswith(f"pgcontroller: cannot reach the controller at {uri} ("), wrong_ca
    assert "certificate verify failed" in wrong_ca, wrong_ca
    assert plain == (
        f"pgcontroller: cannot reach the controller at tcp://127.0.0.1:{port} (the connection was closed; "
        "if it serves TLS, use tls://host:port)\n"
    ), plain
    assert absent.startswith(f"pgcontroller: cannot read --tls-trust-file {tmp_path / 'absent.pem'}"), absent
