"""The analyst role: reads every reporting view, and every other action it tries is refused by
privileges (not only by its read-only default, which a session can switch off); its limits hold;
creation is all-or-nothing and refuses names that are not analysts; the CLI reads passwords
safely; and the SCRAM verifier it stores is the one PostgreSQL computes, so logins work.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

import asyncpg
import pytest

from app.cli import main
from app.cli.analyst import parse_duration_ms
from app.domain.errors import AlreadyExists, IllegalState, InvalidInput, OperationNotAllowed
from app.store import migrate
from app.store.analysts import (
    ANALYST_GROUP,
    AnalystLimits,
    AnalystOutcome,
    create_analyst,
    forbidden_privileges,
    scram_sha256_verifier,
)
from tests.support.db import throwaway_cluster

PASSWORD = "correct horse battery staple"
LIMITS = AnalystLimits(statement_timeout_ms=500, connection_limit=3)

Connect = Callable[..., Awaitable[asyncpg.Connection]]


def analyst_name() -> str:
    return f"analyst_{uuid.uuid4().hex[:10]}"


async def connect_as(db_url: str, user: str, password: str = PASSWORD) -> asyncpg.Connection:
    parts = urlsplit(db_url)
    return await asyncpg.connect(
        host=parts.hostname, port=parts.port, user=user, password=password, database=parts.path.lstrip("/")
    )


async def admin(db_url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(db_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def drop_role(db_url: str, name: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", name):
            await conn.execute(f'DROP OWNED BY "{name}"')
            await conn.execute(f'DROP ROLE "{name}"')
    finally:
        await conn.close()


@pytest.fixture
async def analyst(db_url: str) -> AsyncIterator[str]:
    name = analyst_name()
    assert await create_analyst(db_url, name, PASSWORD, LIMITS) is AnalystOutcome.CREATED
    try:
        yield name
    finally:
        await drop_role(db_url, name)


@pytest.fixture
async def session(db_url: str, analyst: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect_as(db_url, analyst)
    try:
        yield conn
    finally:
        await conn.close()


async def reporting_views(db_url: str) -> list[str]:
    rows = await admin(
        db_url,
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'reporting' AND c.relkind = 'v' ORDER BY 1",
    )
    return [r["relname"] for r in rows]


async def test_the_analyst_reads_every_reporting_view(db_url: str, session: asyncpg.Connection) -> None:
    views = await reporting_views(db_url)
    assert {"streams", "scale_events", "segments", "transactions", "truncations", "retention_set"} <= set(
        views
    )
    for view in views:
        # Unqualified: the analyst's search_path is the reporting schema.
        await session.fetch(f"SELECT * FROM {view} LIMIT 5")
        await session.fetch(f"SELECT * FROM reporting.{view} LIMIT 5")


async def test_the_sessions_start_read_only_with_the_limits(session: asyncpg.Connection) -> None:
    assert await session.fetchval("SHOW statement_timeout") == "500ms"
    assert await session.fetchval("SHOW idle_in_transaction_session_timeout") == "500ms"
    assert await session.fetchval("SHOW default_transaction_read_only") == "on"
    assert await session.fetchval("SHOW search_path") == "reporting"
    with pytest.raises(asyncpg.QueryCanceledError):
        await session.execute("SELECT pg_sleep(3)")
    assert await session.fetchval("SHOW transaction_read_only") == "on"


# Each is refused by a missing privilege even once the session is no longer read-only.
FORBIDDEN = [
    # base tables: no reads, no writes
    "SELECT * FROM public.streams",
    "SELECT count(*) FROM public.epochs",
    "SELECT * FROM public.completed_txn_details",
    "SELECT * FROM public.alembic_version",
    "COPY public.transactions TO STDOUT",
    "INSERT INTO public.scopes (name, created_at) VALUES ('x', 0)",
    "UPDATE public.stream_states SET state = 'SEALED'",
    "DELETE FROM public.requests",
    "TRUNCATE public.epochs",
    # the views are read-only for analysts even where PostgreSQL could write through them
    "INSERT INTO reporting.bucket_owners (service, bucket) VALUES ('requests', 99)",
    "UPDATE reporting.containers SET port = 1",
    "DELETE FROM reporting.cluster_settings",
    # DDL, anywhere
    "CREATE TABLE public.t (i int)",
    "CREATE TABLE reporting.t (i int)",
    "CREATE TEMPORARY TABLE t (i int)",
    "CREATE VIEW reporting.v AS SELECT 1 AS one",
    "CREATE SCHEMA mine",
    "CREATE FUNCTION public.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "DROP VIEW reporting.streams",
    "ALTER VIEW reporting.streams RENAME TO s",
    "ALTER TABLE public.streams ADD COLUMN x int",
    "CREATE INDEX ON public.epochs (creation_time)",
    "COMMENT ON VIEW reporting.streams IS 'mine'",
    "GRANT SELECT ON public.streams TO PUBLIC",
    # pgcontroller's functions and sequences
    "SELECT public.pgc_java_hash('a/b')",
    "SELECT public.pgc_request_bucket('a', 'b')",
    "SELECT nextval('public.txn_counter')",
    # shared state every role could touch by default: the controllers' advisory locks, large objects
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_lock(1, 2)",
    "SELECT pg_advisory_xact_lock_shared(3)",
    "SELECT lo_create(0)",
    "SELECT lo_from_bytea(0, 'x'::bytea)",
    # roles
    "SET ROLE pgcontroller",
    "CREATE ROLE someone",
    "ALTER ROLE CURRENT_USER CONNECTION LIMIT 100",
]


@pytest.mark.parametrize("sql", FORBIDDEN)
async def test_every_forbidden_action_is_refused(session: asyncpg.Connection, sql: str) -> None:
    await session.execute("SET default_transaction_read_only = off")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await session.execute(sql)


async def test_the_forbidden_list_is_allowed_to_the_controller(db_url: str) -> None:
    # The refusals above come from the analyst's privileges, not from statements that fail for
    # everyone: the controller's own role may read the base tables and take its advisory locks.
    conn = await asyncpg.connect(db_url)
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.fetch("SELECT * FROM public.streams")
        await conn.fetchval("SELECT pg_try_advisory_xact_lock(1, 2)")
        await conn.fetchval("SELECT public.pgc_java_hash('a/b')")
        await conn.execute("CREATE TEMPORARY TABLE t (i int)")
        await conn.execute("DELETE FROM reporting.cluster_settings")
    finally:
        await transaction.rollback()
        await conn.close()


async def test_the_connection_limit_holds(db_url: str, analyst: str) -> None:
    held = [await connect_as(db_url, analyst) for _ in range(LIMITS.connection_limit)]
    try:
        with pytest.raises(asyncpg.TooManyConnectionsError):
            await connect_as(db_url, analyst)
    finally:
        for conn in held:
            await conn.close()


async def test_the_grants_survive_a_rebuild_of_the_reporting_schema(db_url: str, analyst: str) -> None:
    # Every migration run drops and rebuilds the schema (migrations/env.py).
    await asyncio.to_thread(migrate.upgrade_to_head, db_url)
    conn = await connect_as(db_url, analyst)
    try:
        for view in await reporting_views(db_url):
            await conn.fetch(f"SELECT * FROM reporting.{view} LIMIT 1")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM public.streams")
    finally:
        await conn.close()
    assert await admin_leaks(db_url, analyst) == []


async def admin_leaks(db_url: str, name: str) -> list[str]:
    conn = await asyncpg.connect(db_url)
    try:
        return await forbidden_privileges(conn, name)
    finally:
        await conn.close()


async def test_a_function_added_later_is_not_executable_by_analysts(db_url: str, analyst: str) -> None:
    await admin(db_url, "CREATE FUNCTION public.pgc_later() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    assert await admin_leaks(db_url, analyst) == ["EXECUTE on pgc_later()"]
    await asyncio.to_thread(migrate.upgrade_to_head, db_url)
    assert await admin_leaks(db_url, analyst) == []


async def test_reading_the_marts_is_allowed_and_writing_them_is_a_leak(db_url: str, analyst: str) -> None:
    # What the PySpark pipeline grants the group on the schema it writes (spark/state.py).
    await admin(db_url, "CREATE SCHEMA reporting_marts")
    await admin(db_url, "CREATE TABLE reporting_marts.daily (day date, n bigint)")
    await admin(db_url, f"GRANT USAGE ON SCHEMA reporting_marts TO {ANALYST_GROUP}")
    await admin(db_url, f"GRANT SELECT ON reporting_marts.daily TO {ANALYST_GROUP}")
    assert await admin_leaks(db_url, analyst) == []
    await admin(db_url, f"GRANT INSERT ON reporting_marts.daily TO {ANALYST_GROUP}")
    assert await admin_leaks(db_url, analyst) == ["INSERT on reporting_marts.daily"]


async def test_rerunning_updates_the_analyst(db_url: str, analyst: str) -> None:
    limits = AnalystLimits(statement_timeout_ms=90_000, connection_limit=7)
    assert await create_analyst(db_url, analyst, "another long password", limits) is AnalystOutcome.UPDATED
    rows = await admin(db_url, "SELECT rolconnlimit, rolconfig FROM pg_roles WHERE rolname = $1", analyst)
    assert rows[0]["rolconnlimit"] == 7
    assert "statement_timeout=90000ms" in rows[0]["rolconfig"]
    assert verifies(await stored_verifier(db_url, analyst), "another long password")


async def test_a_role_that_is_not_an_analyst_is_refused(db_url: str) -> None:
    name = analyst_name()
    await admin(db_url, f"CREATE ROLE {name} LOGIN CONNECTION LIMIT 50")
    try:
        with pytest.raises(AlreadyExists, match="not an analyst"):
            await create_analyst(db_url, name, PASSWORD, LIMITS)
        rows = await admin(
            db_url,
            "SELECT rolconnlimit, rolconfig, pg_has_role(oid, $2, 'MEMBER') AS analyst FROM pg_roles "
            "WHERE rolname = $1",
            name,
            ANALYST_GROUP,
        )
        assert (rows[0]["rolconnlimit"], rows[0]["rolconfig"], rows[0]["analyst"]) == (50, None, False)
        with pytest.raises(AlreadyExists):
            await create_analyst(db_url, "pgcontroller", PASSWORD, LIMITS)
    finally:
        await drop_role(db_url, name)


async def test_a_leak_through_public_refuses_and_leaves_nothing(db_url: str) -> None:
    await admin(db_url, "GRANT SELECT ON public.epochs TO PUBLIC")
    name = analyst_name()
    with pytest.raises(OperationNotAllowed, match="SELECT on epochs"):
        await create_analyst(db_url, name, PASSWORD, LIMITS)
    assert await admin(db_url, "SELECT 1 FROM pg_roles WHERE rolname = $1", name) == []


async def test_a_role_that_cannot_set_analysts_up_changes_nothing(db_url: str) -> None:
    # CREATEROLE alone does not own the database: it cannot take TEMP from PUBLIC nor grant the
    # reporting schema, and the command must stop rather than leave a half-made analyst.
    admin_name, name = analyst_name(), analyst_name()
    await admin(db_url, f"CREATE ROLE {admin_name} LOGIN CREATEROLE PASSWORD '{PASSWORD}'")
    try:
        parts = urlsplit(db_url)
        url = f"postgresql://{admin_name}:{quote(PASSWORD)}@{parts.hostname}:{parts.port}{parts.path}"
        with pytest.raises(OperationNotAllowed):
            await create_analyst(url, name, PASSWORD, LIMITS)
        assert await admin(db_url, "SELECT 1 FROM pg_roles WHERE rolname = $1", name) == []
    finally:
        await drop_role(db_url, admin_name)


@pytest.mark.parametrize(
    ("name", "password", "limits", "message"),
    [
        ("Bob", PASSWORD, LIMITS, "must be 1-63 characters"),
        ("bob; DROP TABLE streams", PASSWORD, LIMITS, "must be 1-63 characters"),
        ("1bob", PASSWORD, LIMITS, "must be 1-63 characters"),
        ("a" * 64, PASSWORD, LIMITS, "must be 1-63 characters"),
        ("pg_bob", PASSWORD, LIMITS, "reserved"),
        (ANALYST_GROUP, PASSWORD, LIMITS, "reserved"),
        ("bob", "short", LIMITS, "at least 12"),
        ("bob", "new\nline password", LIMITS, "line breaks"),
        ("bob", PASSWORD, AnalystLimits(0, 3), "statement timeout must be positive"),
        ("bob", PASSWORD, AnalystLimits(1000, 0), "connection limit"),
        ("bob", PASSWORD, AnalystLimits(1000, -1), "connection limit"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_done(
    db_url: str, name: str, password: str, limits: AnalystLimits, message: str
) -> None:
    roles = await admin(db_url, "SELECT count(*) AS n FROM pg_roles")
    with pytest.raises(InvalidInput, match=message):
        await create_analyst(db_url, name, password, limits)
    assert await admin(db_url, "SELECT count(*) AS n FROM pg_roles") == roles


async def test_a_database_without_reporting_schema_is_refused(db_url: str) -> None:
    await admin(db_url, "DROP SCHEMA reporting CASCADE")
    with pytest.raises(IllegalState, match="run `pgcontroller db upgrade` first"):
        await create_analyst(db_url, analyst_name(), PASSWORD, LIMITS)


# --- passwords ---------------------------------------------------------------------------------


async def stored_verifier(db_url: str, name: str) -> str:
    rows = await admin(db_url, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", name)
    value: str = rows[0]["rolpassword"]
    return value


def verifies(verifier: str, password: str) -> bool:
    iterations, salt = verifier.split("$")[1].split(":")
    return (
        scram_sha256_verifier(password, salt=base64.b64decode(salt), iterations=int(iterations)) == verifier
    )


@pytest.mark.parametrize(
    "password",
    [
        PASSWORD,
        "pässwörd with ümlauts",
        "ﬁne\u00a0ligature and no-break space",  # NFKC maps both: SASLprep must agree with the server
        "x\u00ad\u200bsoft hyphen and zero width",  # mapped to nothing
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 abc",  # mixed direction: prohibited, used as is
    ],
)
async def test_the_verifier_is_the_one_postgresql_computes(db_url: str, password: str) -> None:
    name = analyst_name()
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("SET password_encryption = 'scram-sha-256'")
        literal = password.replace("'", "''")
        await conn.execute(f"CREATE ROLE {name} PASSWORD '{literal}'")
        server = await conn.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", name)
        await conn.execute(f"DROP ROLE {name}")
    finally:
        await conn.close()
    assert server.startswith("SCRAM-SHA-256$")
    assert verifies(server, password)
    assert not verifies(server, password + "x")


async def test_only_a_verifier_reaches_the_server(db_url: str, analyst: str) -> None:
    stored = await stored_verifier(db_url, analyst)
    assert stored.startswith("SCRAM-SHA-256$4096:") and PASSWORD not in stored
    assert verifies(stored, PASSWORD)


@pytest.fixture(scope="module")
def password_cluster_url() -> object:
    """A cluster of its own (the embedded cluster asks every role for its password, over TCP and
    the local socket alike), migrated by its superuser."""
    with throwaway_cluster() as cluster:
        url = cluster.admin_url()
        migrate.upgrade_to_head(url)
        yield url


async def test_the_analyst_logs_in_with_its_password_only(password_cluster_url: str) -> None:
    name = analyst_name()
    password = "pässwörd ﬁne\u00a0and long"
    assert await create_analyst(password_cluster_url, name, password, LIMITS) is AnalystOutcome.CREATED
    try:
        conn = await connect_as(password_cluster_url, name, password)
        try:
            assert await conn.fetchval("SELECT current_user") == name
            await conn.fetch("SELECT * FROM streams")
        finally:
            await conn.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await connect_as(password_cluster_url, name, password + "!")
    finally:
        await drop_role(password_cluster_url, name)


# --- the command line --------------------------------------------------------------------------


async def run_cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def test_the_command_creates_an_analyst_from_a_password_file(db_url: str, tmp_path: Path) -> None:
    name = analyst_name()
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    try:
        code = await run_cli(
            "db", "create-analyst", "--db-url", db_url, "--password-file", str(secret),
            "--statement-timeout", "90s", "--connection-limit", "4", name,
        )  # fmt: skip
        assert code == 0
        rows = await admin(db_url, "SELECT rolconnlimit, rolconfig FROM pg_roles WHERE rolname = $1", name)
        assert rows[0]["rolconnlimit"] == 4
        assert "statement_timeout=90000ms" in rows[0]["rolconfig"]
        assert verifies(await stored_verifier(db_url, name), PASSWORD)
        assert await admin_leaks(db_url, name) == []
    finally:
        await drop_role(db_url, name)


async def test_the_command_takes_the_password_from_the_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = analyst_name()
    monkeypatch.setenv("PGCONTROLLER_ANALYST_PASSWORD", "from the environment")
    try:
        assert await run_cli("db", "create-analyst", "--db-url", db_url, name) == 0
        assert verifies(await stored_verifier(db_url, name), "from the environment")
        rows = await admin(db_url, "SELECT rolconnlimit, rolconfig FROM pg_roles WHERE rolname = $1", name)
        assert rows[0]["rolconnlimit"] == 10 and "statement_timeout=300000ms" in rows[0]["rolconfig"]
    finally:
        await drop_role(db_url, name)


async def test_a_generated_password_is_printed_once_on_stdout(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = analyst_name()
    try:
        assert await run_cli("db", "create-analyst", "--db-url", db_url, "--generate-password", name) == 0
        out, err = capsys.readouterr()
        password = out.strip()
        assert len(password) >= 24 and "\n" not in password
        assert password not in err and f"analyst {name} created" in err
        assert verifies(await stored_verifier(db_url, name), password)
    finally:
        await drop_role(db_url, name)


async def test_the_command_refuses_without_a_password_source(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PGCONTROLLER_ANALYST_PASSWORD", raising=False)
    name = analyst_name()
    assert await run_cli("db", "create-analyst", "--db-url", db_url, name) == 1
    assert "no password" in capsys.readouterr().err
    assert await admin(db_url, "SELECT 1 FROM pg_roles WHERE rolname = $1", name) == []


async def test_the_command_reports_bad_input(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PGCONTROLLER_ANALYST_PASSWORD", PASSWORD)
    assert (
        await run_cli("db", "create-analyst", "--db-url", db_url, "--statement-timeout", "soon", "bob") == 1
    )
    assert "is not a duration" in capsys.readouterr().err
    assert await run_cli("db", "create-analyst", "--db-url", db_url, "Bob") == 1
    assert "must be 1-63 characters" in capsys.readouterr().err
    # No flag takes a password (it would show in `ps` and in shell history), and the refusal
    # does not echo it.
    for flag in (["--password", PASSWORD], [f"--password={PASSWORD}"], ["--pass", PASSWORD]):
        with pytest.raises(SystemExit):
            await run_cli("db", "create-analyst", "--db-url", db_url, *flag, "bob")
        err = capsys.readouterr().err
        assert "--password is not accepted" in err or "unrecognized arguments" in err
        assert PASSWORD not in err


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1500", 1500),
        ("1500ms", 1500),
        ("90s", 90_000),
        ("5min", 300_000),
        ("2h", 7_200_000),
        (" 7 s ", 7000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "s", "1.5s", "-1s", "5 minutes", "5d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_duration_ms(text)
