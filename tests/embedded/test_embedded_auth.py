"""The embedded PostgreSQL trusts nobody: SCRAM for every login (socket and TCP), generated
secrets in owner-only files, a service role that is not a superuser, and no secret in any
process's argv or in serve's log."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import stat
import tempfile
from collections.abc import Iterator

import asyncpg
import pytest

from app import embedded_pg
from app.cli import main
from app.embedded_pg import ADMIN_USER, DB_NAME, DB_USER, EmbeddedPostgres
from app.store.migrate import head_revision, upgrade_to_head
from app.testing.served import start_served
from pgurl import connect_kwargs
from tests.support.scratch import scratch_dir


@pytest.fixture(scope="module")
def embedded() -> Iterator[EmbeddedPostgres]:
    root = scratch_dir("pgc-auth-")
    pg = EmbeddedPostgres(root / "data", fast=True)
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


def secrets_of(pg: EmbeddedPostgres) -> list[str]:
    return [
        (pg.data_dir / name).read_text().splitlines()[0].split(":", 4)[4]
        for name in ("pgpass", "pgpass-admin")
    ]


def port_of(pg: EmbeddedPostgres) -> int:
    return int((pg.data_dir / "pg-port").read_text())


def cmdlines_mentioning(needles: list[str]) -> list[str]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = pathlib.Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            found += [f"{entry.name}: {cmdline}" for n in needles if n in cmdline]
    return found


def test_no_trust_line_and_owner_only_secrets(embedded: EmbeddedPostgres) -> None:
    hba = (embedded.pgdata / "pg_hba.conf").read_text()
    rules = [line.split() for line in hba.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules), rules
    assert any(rule[0] == "local" for rule in rules) and any(rule[0] == "host" for rule in rules)
    for name in ("pgpass", "pgpass-admin"):
        mode = (embedded.data_dir / name).stat().st_mode
        assert stat.S_IMODE(mode) == 0o600, (name, oct(mode))
    service, admin = secrets_of(embedded)
    assert service != admin and len(service) >= 40 and len(admin) >= 40
    # initdb's --pwfile is gone once initdb is done.
    assert not list(embedded.pgdata.parent.glob(".pgc-pw-*"))
    assert cmdlines_mentioning([service, admin]) == []


@pytest.mark.parametrize("where", ["tcp", "socket"])
async def test_every_login_needs_the_password(embedded: EmbeddedPostgres, where: str) -> None:
    host = "127.0.0.1" if where == "tcp" else str(embedded.pgdata)
    if where == "socket":
        assert (embedded.pgdata / f".s.PGSQL.{port_of(embedded)}").exists()
    for user in (ADMIN_USER, DB_USER):
        common = {"host": host, "port": port_of(embedded), "user": user, "database": DB_NAME}
        with pytest.raises((asyncpg.InvalidPasswordError, asyncpg.InterfaceError)):
            await asyncpg.connect(**common, passfile="/nonexistent")
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(**common, password="not-the-password")
    admin = secrets_of(embedded)[1]
    conn = await asyncpg.connect(
        host=host, port=port_of(embedded), user=ADMIN_USER, database=DB_NAME, password=admin
    )
    await conn.close()


async def test_the_service_role_owns_its_database_and_is_no_superuser(embedded: EmbeddedPostgres) -> None:
    # Migrations need no superuser: the service role runs them.
    await asyncio.to_thread(upgrade_to_head, embedded.url())
    conn = await asyncpg.connect(**connect_kwargs(embedded.url()))
    try:
        assert await conn.fetchval("SELECT current_user") == DB_USER
        row = await conn.fetchrow(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
            "FROM pg_roles WHERE rolname = current_user"
        )
        assert row is not None and not any(row.values()), dict(row)
        assert (
            await conn.fetchval(
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
            )
            == DB_USER
        )
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == head_revision()
        assert await conn.fetchval("SELECT tableowner FROM pg_tables WHERE tablename = 'streams'") == DB_USER
        # What trust made possible for every local user: commands as the server's OS user.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("COPY (SELECT 1) TO PROGRAM 'true'")
    finally:
        await conn.close()
    admin = await asyncpg.connect(**connect_kwargs(embedded.admin_url()))
    try:
        assert await admin.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    finally:
        await admin.close()


def test_db_url_prints_a_url_that_works_and_holds_no_secret(
    embedded: EmbeddedPostgres, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "url", "--data-dir", str(embedded.data_dir)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == embedded.url()
    assert not any(secret in printed for secret in secrets_of(embedded))
    # A second start (another process's `db start`) keeps the secrets and the role in step.
    assert EmbeddedPostgres(embedded.data_dir).start() is False
    upgrade_to_head(printed)


async def test_serve_on_the_embedded_database_shows_no_secret(embedded: EmbeddedPostgres) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="pgc-auth-serve-"))
    try:
        served = await start_served(work, "--data-dir", str(embedded.data_dir))
        try:
            secrets = secrets_of(embedded)
            assert cmdlines_mentioning(secrets) == []
            environ = await asyncio.to_thread(pathlib.Path(f"/proc/{served.process.pid}/environ").read_bytes)
            assert not any(s.encode() in environ for s in secrets)
        finally:
            assert await served.stop() == 0
        log = served.log()
        assert "ready" in log and not any(s in log for s in secrets)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def test_serve_logs_the_database_url_without_its_password(embedded: EmbeddedPostgres) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="pgc-auth-inline-"))
    service = secrets_of(embedded)[0]
    url = f"postgresql://{DB_USER}:{service}@127.0.0.1:{port_of(embedded)}/{DB_NAME}?sslmode=disable"
    try:
        served = await start_served(work, env={"PGCONTROLLER_DB_URL": url})
        try:
            assert cmdlines_mentioning([service]) == []
        finally:
            assert await served.stop() == 0
        log = served.log()
        assert f"postgresql://{DB_USER}:***@127.0.0.1:{port_of(embedded)}/{DB_NAME}" in log, log[-2000:]
        assert service not in log
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def test_serve_with_a_wrong_password_says_so_without_the_secret(embedded: EmbeddedPostgres) -> None:
    work = pathlib.Path(tempfile.mkdtemp(prefix="pgc-auth-wrong-"))
    wrong = "Wr0ngS3cretNotToBeShown"
    url = f"postgresql://{DB_USER}:{wrong}@127.0.0.1:{port_of(embedded)}/{DB_NAME}"
    try:
        # Given through the environment (as a secret should be), not argv.
        with pytest.raises(RuntimeError, match="serve exited") as failed:
            await start_served(work, env={"PGCONTROLLER_DB_URL": url})
        log = (work / "serve.log").read_text()
        assert "password authentication failed" in log, log[-2000:]
        assert wrong not in log and wrong not in str(failed.value)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def test_create_analyst_on_the_embedded_database_runs_as_its_superuser(
    embedded: EmbeddedPostgres, capsys: pytest.CaptureFixture[str]
) -> None:
    await asyncio.to_thread(upgrade_to_head, embedded.url())
    argv = [
        "db",
        "create-analyst",
        "--data-dir",
        str(embedded.data_dir),
        "--generate-password",
        "emb_analyst",
    ]
    assert await asyncio.to_thread(main, argv) == 0
    out, err = capsys.readouterr()
    password = out.strip()
    assert password not in err and "passfile" not in err and not any(s in err for s in secrets_of(embedded))
    conn = await asyncpg.connect(
        host="127.0.0.1", port=port_of(embedded), user="emb_analyst", password=password, database=DB_NAME
    )
    try:
        assert await conn.fetchval("SELECT count(*) FROM reporting.streams") == 0
    finally:
        await conn.close()


class _OlderPgcontroller(EmbeddedPostgres):
    """Makes the cluster as releases before password authentication did: initdb --auth=trust with
    the superuser `pgcontroller`, and no password files."""

    def _initdb(self, bindir: pathlib.Path, pgdata: pathlib.Path, user: object) -> None:
        pgdata.mkdir(mode=0o700, exist_ok=True)
        run_as = self._cluster_user(pgdata)
        if run_as is not None:
            os.chown(pgdata, run_as.uid, run_as.gid)
        argv = [str(bindir / "initdb"), "-D", str(pgdata), "-U", DB_USER, "--auth=trust", "--no-sync"]
        result = embedded_pg._run(argv, run_as, timeout=600)
        assert result.returncode == 0, result.stderr

    def _require_passwords(self, *args: object) -> None:
        pass

    def _ensure_database(self, bindir: pathlib.Path, port: int) -> None:
        psql = embedded_pg._client_binary(bindir, "createdb")
        embedded_pg._run([psql, "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER, DB_NAME], None, 60)


async def test_a_cluster_made_with_trust_is_converted_to_passwords() -> None:
    root = scratch_dir("pgc-legacy-")
    old = _OlderPgcontroller(root / "data", fast=True)
    try:
        old.start()
        port = port_of(old)
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user=DB_USER, database=DB_NAME)
        await conn.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
        await conn.close()
        old.stop()

        new = EmbeddedPostgres(root / "data", fast=True)
        assert new.start() is True
        port = port_of(new)
        for host in ("127.0.0.1", str(new.pgdata)):
            with pytest.raises((asyncpg.InvalidPasswordError, asyncpg.InterfaceError)):
                await asyncpg.connect(
                    host=host, port=port, user=DB_USER, database=DB_NAME, passfile="/nonexistent"
                )
        conn = await asyncpg.connect(**connect_kwargs(new.url()))
        try:
            assert await conn.fetchval("SELECT v FROM kept") == 42
        finally:
            await conn.close()
        assert new.admin_url().startswith(f"postgresql://{DB_USER}@")
        assert new.start() is False  # a second start finds it converted
        new.stop()
        assert new.start() is True
    finally:
        EmbeddedPostgres(root / "data").stop()
        shutil.rmtree(root, ignore_errors=True)
