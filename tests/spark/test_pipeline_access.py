"""Who may run the pipeline and what it answers when it cannot: a role owning only the marts
schema runs it on a database hardened for analysts, analysts read the marts without being
named and write nothing, `--grant-to` roles read them too, other roles, a concurrent run, a
missing driver or database are refused with one clear line."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from pyspark.sql import SparkSession

import pgurl
from app.cli import main
from app.dev.history_gen import SeedSpec
from app.dev.seed import seed_history
from app.store.analysts import AnalystLimits, create_analyst
from spark.config import ANALYST_GROUP
from spark.marts import TABLE_DDL
from spark.state import Control, MartsForbidden
from tests.spark.conftest import pipeline_config, run_pipeline

SMALL = SeedSpec(streams=2, epochs_per_stream=30, txns_per_stream=10, seed=3, start_ms=1_700_000_000_000)


# Every role these tests make logs in with this password (the embedded cluster trusts nobody).
ROLE_PASSWORD = "a-long-enough-secret"


def as_role(db_url: str, role: str) -> str:
    parsed = pgurl.parse(db_url)
    params = {k: v for k, v in parsed.params.items() if k != "passfile"}
    return parsed.replace(user=role, password=ROLE_PASSWORD, params=params).to_url()


@pytest.fixture
async def seeded(db_url: str) -> str:
    await seed_history(db_url, SMALL, analyze=False)
    return db_url


@pytest.fixture
async def roles(db_url: str) -> AsyncIterator[list[str]]:
    """Role names unique to this test (roles are cluster-wide), dropped afterwards."""
    names: list[str] = []
    yield names
    conn = await asyncpg.connect(db_url)
    try:
        for name in names:
            with contextlib.suppress(asyncpg.UndefinedObjectError):
                await conn.execute(f"DROP OWNED BY {name} CASCADE")
                await conn.execute(f"DROP ROLE {name}")
    finally:
        await conn.close()


async def test_a_role_owning_only_the_marts_schema_runs_it_and_analysts_only_read(
    seeded: str, roles: list[str], spark_session: SparkSession, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    runner, analyst, stranger = f"pipe_{suffix}", f"ana_{suffix}", f"other_{suffix}"
    roles.extend([runner, analyst, stranger])
    # `db create-analyst` hardens the database: no TEMP, no advisory locks for PUBLIC.
    await create_analyst(seeded, analyst, ROLE_PASSWORD, AnalystLimits(30_000, 5))
    conn = await asyncpg.connect(seeded)
    try:
        await conn.execute(f"CREATE ROLE {runner} LOGIN IN ROLE pgc_analysts PASSWORD '{ROLE_PASSWORD}'")
        await conn.execute(f"CREATE ROLE {stranger} LOGIN PASSWORD '{ROLE_PASSWORD}'")
        await conn.execute(f"CREATE SCHEMA reporting_marts AUTHORIZATION {runner}")
        assert not await conn.fetchval(
            "SELECT has_database_privilege($1, current_database(), 'CREATE')", runner
        )
        assert not await conn.fetchval(
            "SELECT has_database_privilege($1, current_database(), 'TEMP')", runner
        )

        # No --grant-to for the analysts: their group reads the marts by default.
        config = pipeline_config(as_role(seeded, runner), tmp_path, grant_to=(stranger,))
        result = await run_pipeline(spark_session, config)
        assert result.facts_written > 0

        tables = [
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'reporting_marts'")
        ]
        assert {"stream_daily_facts", "daily_facts", "stream_totals", "pipeline_runs"} <= set(tables)
        assert not [t for t in tables if t.startswith("_stage_")]
        for role in (ANALYST_GROUP, stranger):
            assert await conn.fetchval("SELECT has_schema_privilege($1, 'reporting_marts', 'USAGE')", role)
            assert not await conn.fetchval(
                "SELECT has_schema_privilege($1, 'reporting_marts', 'CREATE')", role
            )
            for table in tables:
                name = f"reporting_marts.{table}"
                assert await conn.fetchval("SELECT has_table_privilege($1, $2, 'SELECT')", role, name)
                for write in ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
                    assert not await conn.fetchval(
                        "SELECT has_table_privilege($1, $2, $3)", role, name, write
                    ), (role, table, write)
        # `db create-analyst`'s leak check accepts what the pipeline granted.
        late = f"late_{suffix}"
        roles.append(late)
        await create_analyst(seeded, late, "another-long-secret", AnalystLimits(30_000, 5))
        # What default privileges promise: a table the pipeline's role adds later is readable too.
        runner_conn = await asyncpg.connect(as_role(seeded, runner))
        try:
            await runner_conn.execute("CREATE TABLE reporting_marts.added_later (x int)")
        finally:
            await runner_conn.close()
        assert await conn.fetchval(
            "SELECT has_table_privilege($1, 'reporting_marts.added_later', 'SELECT')", ANALYST_GROUP
        )

        reader = await asyncpg.connect(as_role(seeded, analyst))
        try:
            rows = await reader.fetchval("SELECT count(*) FROM reporting_marts.stream_daily_facts")
            assert rows == result.facts_written
            # Read-only is only the analyst's session default: privileges must refuse, too.
            await reader.execute("SET default_transaction_read_only = off")
            for statement in (
                "DELETE FROM reporting_marts.stream_daily_facts",
                "UPDATE reporting_marts.stream_totals SET active_days = 0",
                "CREATE TABLE reporting_marts.mine (x int)",
                "INSERT INTO reporting_marts.pipeline_runs SELECT * FROM reporting_marts.pipeline_runs",
                "TRUNCATE reporting_marts.daily_facts",
                "SELECT * FROM reporting_marts.pipeline_lock FOR UPDATE",
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await reader.execute(statement)
        finally:
            await reader.close()
        other = await asyncpg.connect(as_role(seeded, stranger))
        try:
            assert await other.fetchval("SELECT count(*) FROM reporting_marts.stream_daily_facts") == rows
        finally:
            await other.close()
    finally:
        await conn.close()

    for role in (analyst, stranger):
        with pytest.raises(MartsForbidden, match="AUTHORIZATION"):
            await run_pipeline(spark_session, pipeline_config(as_role(seeded, role), tmp_path / role))


def cli(*args: str) -> int:
    return main(["pipeline", "run", "--quiet", *args])


@pytest.fixture
def output(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "out"


def test_the_command_runs_the_pipeline_in_the_active_session(
    seeded: str, spark_session: SparkSession, output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--db-url", seeded, "--out", str(output), "--master", "local[2]") == 0
    assert capsys.readouterr().out.strip().endswith("summary.html")
    assert (output / "summary.html").stat().st_size > 0
    assert not spark_session.sparkContext._jsc.sc().isStopped()  # the shared session is still up


def test_bad_arguments_are_refused_before_anything_starts(
    output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://u@127.0.0.1:1/db"
    for args, needle in (
        (["--out", str(output)], "--db-url"),
        (["--db-url", "mysql://x/y", "--out", str(output)], "postgresql://"),
        (["--db-url", url, "--out", str(output), "--master", "local[x]"], "local[x]"),
        (["--db-url", url, "--out", str(output), "--partitions", "0"], "partitions"),
        (["--db-url", url, "--read-url", "mysql://x/y", "--out", str(output)], "--read-url"),
    ):
        assert cli(*args) == 2
        assert needle in capsys.readouterr().err


def test_a_missing_driver_or_database_is_one_line(
    seeded: str, db_url: str, output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--db-url", seeded, "--out", str(output), "--jdbc-jar", "/nonexistent/pg.jar") == 1
    err = capsys.readouterr().err
    assert "/nonexistent/pg.jar" in err and "libpostgresql-jdbc-java" in err and len(err.splitlines()) == 1
    gone = pgurl.parse(db_url).with_database("no_such_database").to_url()
    assert cli("--db-url", gone, "--out", str(output)) == 1
    err = capsys.readouterr().err
    assert "no_such_database" in err and len(err.splitlines()) == 1
    # The views' database missing (a standby's URL mistyped): the same, after the marts' one answered.
    assert cli("--db-url", seeded, "--read-url", gone, "--out", str(output)) == 1
    err = capsys.readouterr().err
    assert "no_such_database" in err and len(err.splitlines()) == 1


def create_marts(url: str) -> None:
    with Control(url) as control:
        control.ensure_schema(TABLE_DDL)


async def test_a_second_run_while_one_runs_is_refused(
    seeded: str, output: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await asyncio.to_thread(create_marts, seeded)
    holder = await asyncpg.connect(seeded)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM reporting_marts.pipeline_lock FOR UPDATE")
            code = await asyncio.to_thread(cli, "--db-url", seeded, "--out", str(output))
            assert code == 1
            assert "another pipeline run is in progress" in capsys.readouterr().err
    finally:
        await holder.close()


async def test_an_empty_database_gives_an_empty_report(
    db_url: str, spark_session: SparkSession, tmp_path: Path
) -> None:
    result = await run_pipeline(spark_session, pipeline_config(db_url, tmp_path))
    assert (result.rows_read, result.facts_written, result.charts) == (0, 0, ())
    page = await asyncio.to_thread(Path(result.summary).read_text)
    assert "No activity yet" in page and "No charts" in page
    again = await run_pipeline(spark_session, pipeline_config(db_url, tmp_path))
    assert (again.full_run, again.recomputed_from, again.run_id) == (False, None, result.run_id + 1)
