"""Summary tables in `reporting_marts` for SQL users: the lake's facts and per-stream totals.

Spark writes a run's recomputed rows into private staging tables; one SQL transaction then
replaces every mart row of the recomputed days, refreshes the totals of the streams touched
and records the run (spark.state), so readers see either the previous run or this one, never
a mix. Tables of an older shape (and tables older pipelines kept) are replaced in that same
transaction by the full run they force, so a crash leaves the old marts whole.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import date, datetime

import asyncpg
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from spark.config import MARTS_SCHEMA
from spark.facts import COUNTS, DAILY, STREAM_DAILY
from spark.jdbc import JdbcTarget
from spark.state import Control, PipelineBusy, grant_reads

STREAM_DAILY_TABLE = f"{MARTS_SCHEMA}.stream_daily_facts"
DAILY_TABLE = f"{MARTS_SCHEMA}.daily_facts"
TOTALS_TABLE = f"{MARTS_SCHEMA}.stream_totals"
# Kept by pipelines before truncations were read from reporting.truncation_history.
OBSOLETE_TABLES = (f"{MARTS_SCHEMA}.truncation_observations",)
STAGE_PREFIX = "_stage_"

_PG_TYPES: dict[T.DataType, str] = {
    T.DateType(): "date",
    T.LongType(): "bigint",
    T.DoubleType(): "double precision",
    T.StringType(): "text",
}
_NOT_NULL = {"date", "stream_id", *COUNTS}

Columns = tuple[tuple[str, str], ...]  # name, PostgreSQL type (as format_type spells it)


def _columns(schema: tuple[tuple[str, T.DataType, str], ...]) -> Columns:
    return tuple((name, _PG_TYPES[kind]) for name, kind, _ in schema)


def _column_list(columns: Columns, not_null: set[str]) -> str:
    return ",\n    ".join(f"{n} {t}{' NOT NULL' if n in not_null else ''}" for n, t in columns)


def _ddl(table: str, columns: Columns, key: str, not_null: set[str]) -> str:
    columns_sql = _column_list(columns, not_null)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {columns_sql},\n    PRIMARY KEY ({key})\n)"


STREAM_DAILY_COLUMNS = _columns(STREAM_DAILY)
DAILY_COLUMNS = _columns(DAILY)
TOTALS_COLUMNS: Columns = (
    ("stream_id", "bigint"),
    ("scope", "text"),
    ("stream", "text"),
    ("first_day", "date"),
    ("last_day", "date"),
    ("active_days", "bigint"),
    *((name, "bigint") for name in COUNTS),
    ("epoch_last", "bigint"),
    ("segment_count_last", "bigint"),
)

# The tables and the columns a run writes, in order: a table that differs is replaced.
TABLES: dict[str, Columns] = {
    STREAM_DAILY_TABLE: STREAM_DAILY_COLUMNS,
    DAILY_TABLE: DAILY_COLUMNS,
    TOTALS_TABLE: TOTALS_COLUMNS,
}

TABLE_DDL = [
    _ddl(STREAM_DAILY_TABLE, STREAM_DAILY_COLUMNS, "date, stream_id", _NOT_NULL),
    _ddl(DAILY_TABLE, DAILY_COLUMNS, "date", _NOT_NULL),
    _ddl(TOTALS_TABLE, TOTALS_COLUMNS, "stream_id", {"first_day", "last_day", "active_days", *COUNTS}),
    f"CREATE INDEX IF NOT EXISTS stream_daily_facts_by_stream ON {STREAM_DAILY_TABLE} (stream_id, date)",
]

# Totals of the touched streams (a staging table), recomputed from their facts; a stream
# with no facts left (deleted before its days were recomputed) loses its totals row.
_REFRESH_TOTALS = f"""
INSERT INTO {TOTALS_TABLE}
SELECT f.stream_id, max(f.scope), max(f.stream), min(f.date), max(f.date), count(*),
       {", ".join(f"sum(f.{name})" for name in COUNTS)},
       (array_agg(f.epoch_end ORDER BY f.date DESC) FILTER (WHERE f.epoch_end IS NOT NULL))[1],
       (array_agg(f.segment_count_end ORDER BY f.date DESC) FILTER (WHERE f.segment_count_end IS NOT NULL))[1]
FROM {STREAM_DAILY_TABLE} f JOIN {{touched}} USING (stream_id)
GROUP BY f.stream_id
"""


def outdated(control: Control) -> list[str]:
    """The marts' tables this pipeline must replace: obsolete ones still there, and ones
    whose columns are not the ones it writes (made by an older pipeline). Empty: current."""

    async def go(c: asyncpg.Connection) -> list[str]:
        found = []
        for table in OBSOLETE_TABLES:
            if await c.fetchval("SELECT to_regclass($1) IS NOT NULL", table):
                found.append(table)
        for table, columns in TABLES.items():
            rows = await c.fetch(
                """SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute
                   WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum""",
                table,
            )
            if tuple((r["attname"], r["type"]) for r in rows) != columns:
                found.append(table)
        return found

    return control.call(go)


@dataclass(frozen=True)
class Staging:
    """This run's private tables. Plain tables in the marts schema, not TEMP ones: the pipeline's
    role needs no privilege on the database beyond connecting."""

    stream_daily: str
    daily: str
    touched: str

    def all(self) -> str:
        return f"{self.stream_daily}, {self.daily}, {self.touched}"


@dataclass(frozen=True)
class RunRecord:
    lake: str
    started_at: datetime
    master: str
    full_run: bool
    read_since_ms: int
    high_water_ms: int
    recomputed_from: date | None
    rows_read: int
    facts_written: int
    facts_version: str


def prepare(control: Control) -> Staging:
    """Creates this run's empty staging tables and drops stale ones of crashed runs.

    Called under the run lock, so no other run's staging tables can be in use. Staging tables
    get the columns this pipeline writes, whatever shape the marts still have.
    """
    token = secrets.token_hex(4)
    staging = Staging(
        stream_daily=f"{MARTS_SCHEMA}.{STAGE_PREFIX}stream_daily_{token}",
        daily=f"{MARTS_SCHEMA}.{STAGE_PREFIX}daily_{token}",
        touched=f"{MARTS_SCHEMA}.{STAGE_PREFIX}touched_{token}",
    )

    async def go(c: asyncpg.Connection) -> None:
        stale = await c.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND starts_with(tablename, $2)",
            MARTS_SCHEMA,
            STAGE_PREFIX,
        )
        for row in stale:
            await c.execute(f'DROP TABLE IF EXISTS {MARTS_SCHEMA}."{row["tablename"]}"')
        for table, columns in ((staging.stream_daily, STREAM_DAILY_COLUMNS), (staging.daily, DAILY_COLUMNS)):
            await c.execute(f"CREATE UNLOGGED TABLE {table} ({_column_list(columns, _NOT_NULL)})")
        await c.execute(f"CREATE UNLOGGED TABLE {staging.touched} (stream_id bigint PRIMARY KEY)")
        # The default privileges gave readers these too: a half-written run is not theirs to
        # read, and a reader's lock on one would hold up the commit that drops it.
        for role in control.readers:
            await c.execute(f"REVOKE ALL ON {staging.all()} FROM {role}")

    control.call(go)
    return staging


def write_stage(frame: DataFrame, target: JdbcTarget, table: str) -> None:
    frame.write.jdbc(
        url=target.url,
        table=table,
        mode="append",
        # One multi-row INSERT per batch instead of one statement per row.
        properties=target.properties(batchsize="5000", reWriteBatchedInserts="true"),
    )


def commit(
    control: Control,
    staging: Staging,
    run: RunRecord,
    previous_run_id: int | None,
    replace_tables: bool = False,
) -> int:
    """Replaces the marts' rows of days >= run.recomputed_from and records the run, atomically.

    `previous_run_id` is the newest run of any lake when this one started: the marts are one
    set for every lake, so any run committed since then (only possible if the run lock was
    bypassed) may have written what this run's older reads would overwrite; this one then
    fails with PipelineBusy, changing nothing. `replace_tables` (a full run only): drop the
    obsolete and outdated tables (`outdated`) and create the current ones first.
    """
    if replace_tables and run.recomputed_from != date.min:
        raise ValueError("replacing the marts' tables takes a full run")

    async def go(c: asyncpg.Connection) -> int:
        async with c.transaction():
            await c.execute(f"LOCK TABLE {MARTS_SCHEMA}.pipeline_runs IN SHARE ROW EXCLUSIVE MODE")
            latest = await c.fetchval(f"SELECT max(run_id) FROM {MARTS_SCHEMA}.pipeline_runs")
            if latest != previous_run_id:
                raise PipelineBusy(f"run {latest} committed while this run was computing; run again")
            run_id: int = await c.fetchval(
                f"""INSERT INTO {MARTS_SCHEMA}.pipeline_runs (lake, started_at, master, full_run,
                        read_since_ms, high_water_ms, recomputed_from, rows_read, facts_written,
                        facts_version)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING run_id""",
                run.lake,
                run.started_at,
                run.master,
                run.full_run,
                run.read_since_ms,
                run.high_water_ms,
                run.recomputed_from,
                run.rows_read,
                run.facts_written,
                run.facts_version,
            )
            if replace_tables:
                await c.execute(f"DROP TABLE IF EXISTS {', '.join([*OBSOLETE_TABLES, *TABLES])}")
                for ddl in TABLE_DDL:
                    await c.execute(ddl)
                await grant_reads(c, control.readers)
            if run.recomputed_from is not None:
                await _replace_days(c, staging, run.recomputed_from)
            await c.execute(f"DROP TABLE {staging.all()}")
            return run_id

    return control.call(go)


def _names(columns: Columns) -> str:
    return ", ".join(name for name, _ in columns)


async def _replace_days(c: asyncpg.Connection, staging: Staging, first_day: date) -> None:
    await c.execute(
        f"""WITH gone AS (DELETE FROM {STREAM_DAILY_TABLE} WHERE date >= $1 RETURNING stream_id)
            INSERT INTO {staging.touched} SELECT DISTINCT stream_id FROM gone""",
        first_day,
    )
    await c.execute(
        f"INSERT INTO {staging.touched} SELECT DISTINCT stream_id FROM {staging.stream_daily} "
        "ON CONFLICT DO NOTHING"
    )
    await c.execute(f"DELETE FROM {DAILY_TABLE} WHERE date >= $1", first_day)
    for table, stage, columns in (
        (STREAM_DAILY_TABLE, staging.stream_daily, STREAM_DAILY_COLUMNS),
        (DAILY_TABLE, staging.daily, DAILY_COLUMNS),
    ):
        await c.execute(f"INSERT INTO {table} ({_names(columns)}) SELECT {_names(columns)} FROM {stage}")
    await c.execute(f"DELETE FROM {TOTALS_TABLE} t USING {staging.touched} g WHERE t.stream_id = g.stream_id")
    await c.execute(_REFRESH_TOTALS.format(touched=staging.touched))


def drop_staging(control: Control, staging: Staging) -> None:
    control.call(lambda c: c.execute(f"DROP TABLE IF EXISTS {staging.all()}"))
