"""The database clients over TLS to a real PostgreSQL with ssl=on (certificates from
`make_dev_certs`): sslmode=require, verify-full with sslrootcert, client certificates, for
`db upgrade`, serve's pool and LISTEN connection, and `db create-analyst`; and the refusals."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from app.cli import main
from app.embedded_pg import EmbeddedPostgres, ServerTls
from app.security.certs import CertFiles, make_dev_certs
from app.store.migrate import ensure_schema, head_revision
from app.testing.controller import running_controller
from pgurl import connect_kwargs
from tests.support.scratch import scratch_dir


@pytest.fixture(scope="module")
def tls_pg() -> Iterator[tuple[EmbeddedPostgres, CertFiles, Path]]:
    root = scratch_dir("pgc-tls-")
    certs = make_dev_certs(root / "certs")
    other_ca = make_dev_certs(root / "other").ca_cert
    cluster = EmbeddedPostgres(
        root / "data", fast=True, tls=ServerTls(certs.server_cert, certs.server_key, certs.ca_cert)
    )
    cluster.start()
    try:
        yield cluster, certs, Path(other_ca)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


async def ssl_of_session(url: str) -> tuple[bool, str | None]:
    conn = await asyncpg.connect(**connect_kwargs(url))
    try:
        row = await conn.fetchrow("SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        assert row is not None
        return bool(row["ssl"]), row["client_dn"]
    finally:
        await conn.close()


async def test_every_sslmode_spelling_connects_encrypted_where_asked(
    tls_pg: tuple[EmbeddedPostgres, CertFiles, Path],
) -> None:
    cluster, certs, _ = tls_pg
    url = cluster.url()
    assert await ssl_of_session(url + "&sslmode=require") == (True, None)
    assert (await ssl_of_session(url + "&sslmode=prefer"))[0] is True
    assert (await ssl_of_session(url + "&sslmode=disable"))[0] is False
    full = f"{url}&sslmode=verify-full&sslrootcert={certs.ca_cert}"
    assert (await ssl_of_session(full))[0] is True
    assert (await ssl_of_session(full.replace("postgresql://", "postgres://")))[0] is True
    # A client certificate is presented and seen by the server.
    with_cert = f"{full}&sslcert={certs.client_cert}&sslkey={certs.client_key}"
    encrypted, client_dn = await ssl_of_session(with_cert)
    assert encrypted and client_dn is not None and "pgcontroller" in client_dn


async def test_verification_refuses_a_server_signed_by_another_ca(
    tls_pg: tuple[EmbeddedPostgres, CertFiles, Path],
) -> None:
    cluster, _, other_ca = tls_pg
    for mode in ("verify-ca", "verify-full", "require"):
        with pytest.raises(Exception, match=r"(?i)certificate verify failed"):
            await ssl_of_session(f"{cluster.url()}&sslmode={mode}&sslrootcert={other_ca}")


async def test_require_against_a_server_without_tls_is_refused(pg_admin_url: str) -> None:
    # The suite's own cluster has no TLS: require must not fall back to plain text.
    with pytest.raises(ConnectionError, match=r"(?i)ssl"):
        await ssl_of_session(pg_admin_url + "&sslmode=require")


def test_db_upgrade_over_tls(tls_pg: tuple[EmbeddedPostgres, CertFiles, Path]) -> None:
    cluster, certs, _ = tls_pg
    # Before pgurl, `db upgrade` died here: connect() got an unexpected keyword argument 'sslmode'.
    assert main(["db", "upgrade", "--db-url", cluster.url() + "&sslmode=require"]) == 0
    full = f"{cluster.url()}&sslmode=verify-full&sslrootcert={certs.ca_cert}"
    assert main(["db", "upgrade", "--db-url", full]) == 0


async def test_serve_pool_and_listener_over_tls(tls_pg: tuple[EmbeddedPostgres, CertFiles, Path]) -> None:
    cluster, certs, _ = tls_pg
    url = (
        f"{cluster.url()}&sslmode=verify-full&sslrootcert={certs.ca_cert}"
        f"&sslcert={certs.client_cert}&sslkey={certs.client_key}&application_name=pgc-tls-test"
    )
    # serve's own start: migrate if behind, then the pool and the LISTEN connection.
    await ensure_schema(url)
    async with running_controller(url) as services:
        await services.scopes.create_scope("tls")
        conn = await asyncpg.connect(**connect_kwargs(url))
        try:
            assert await conn.fetchval("SELECT version_num FROM alembic_version") == head_revision()
            # Every session of the running service (pool, LISTEN, locks) is encrypted.
            rows = await conn.fetch(
                "SELECT a.query, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                "WHERE a.datname = current_database() AND a.backend_type = 'client backend'"
            )
            assert len(rows) >= 3 and all(r["ssl"] for r in rows), rows
            assert any("LISTEN" in r["query"] for r in rows)
        finally:
            await conn.close()


def test_create_analyst_over_tls(
    tls_pg: tuple[EmbeddedPostgres, CertFiles, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, certs, _ = tls_pg
    admin = f"{cluster.admin_url()}&sslmode=verify-full&sslrootcert={certs.ca_cert}"
    assert main(["db", "upgrade", "--db-url", admin]) == 0
    assert main(["db", "create-analyst", "--db-url", admin, "--generate-password", "tls_analyst"]) == 0
    out, err = capsys.readouterr()
    password = out.strip()
    # The printed connection URL keeps the TLS settings and drops the administrator's password file.
    assert "sslmode=verify-full" in err and "passfile" not in err and password not in err
