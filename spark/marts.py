"""Summary tables in `reporting_marts` for SQL users: the lake's facts, per-stream totals and
the truncation observations.

Spark writes a run's recomputed rows into private staging tables; one SQL transaction then
replaces every mart row of the recomputed days, refreshes the totals of the streams touched,
appends the run's truncation observations and records the run (spark.state), so readers see
either the previous run or this one, never a mix.
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
from spark.state import Control, PipelineBusy

STREAM_DAILY_TABLE = f"{MARTS_SCHEMA}.stream_daily_facts"
DAILY_TABLE = f"{MARTS_SCHEMA}.daily_facts"
TOTALS_TABLE = f"{MARTS_SCHEMA}.stream_totals"
OBSERVATIONS_TABLE = f"{MARTS_SCHEMA}.truncation_observations"
STAGE_PREFIX = "_stage_"

_PG_TYPES: dict[T.DataType, str] = {
    T.DateType(): "date",
    T.LongType(): "bigint",
    T.DoubleType(): "double precision",
    T.StringType(): "text",
}
_NOT_NULL = {"date", "stream_id", *COUNTS}


def _ddl(table: str, schema: tuple[tuple[str, T.DataType, str], ...], key: str) -> str:
    cols = ",\n    ".join(
        f"{name} {_PG_TYPES[kind]}{' NOT NULL' if name in _NOT_NULL else ''}" for name, kind, _ in schema
    )
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {cols},\n    PRIMARY KEY ({key})\n)"


TOTALS_DDL = f"""
CREATE TABLE IF NOT EXISTS {TOTALS_TABLE} (
    stream_id bigint PRIMARY KEY,
    scope text,
    stream text,
    first_day date NOT NULL,
    last_day date NOT NULL,
    active_days bigint NOT NULL,
    {", ".join(f"{name} bigint NOT NULL" for name in COUNTS)},
    epoch_last bigint,
    segment_count_last bigint
)
"""

# Insert-only: what each run saw of each stream's cumulative truncated bytes, when it grew.
OBSERVATIONS_DDL = f"""
CREATE TABLE IF NOT EXISTS {OBSERVATIONS_TABLE} (
    run_id bigint NOT NULL REFERENCES {MARTS_SCHEMA}.pipeline_runs (run_id),
    stream_id bigint NOT NULL,
    date date NOT NULL,
    truncated_bytes bigint NOT NULL,
    bytes_delta bigint NOT NULL,
    PRIMARY KEY (stream_id, run_id)
)
"""

TABLE_DDL = [
    _ddl(STREAM_DAILY_TABLE, STREAM_DAILY, "date, stream_id"),
    _ddl(DAILY_TABLE, DAILY, "date"),
    TOTALS_DDL,
    OBSERVATIONS_DDL,
    f"CREATE INDEX IF NOT EXISTS stream_daily_facts_by_stream ON {STREAM_DAILY_TABLE} (stream_id, date)",
    f"CREATE INDEX IF NOT EXISTS truncation_observations_by_date ON {OBSERVATIONS_TABLE} (date)",
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


@dataclass(frozen=True)
class Staging:
    """This run's private tables. Plain tables in the marts schema, not TEMP ones: the pipeline's
    role needs no privilege on the database beyond connecting."""

    stream_daily: str
    daily: str
    truncations: str
    touched: str

    def all(self) -> str:
        return f"{self.stream_daily}, {self.daily}, {self.truncations}, {self.touched}"


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


def prepare(control: Control) -> Staging:
    """Creates this run's empty staging tables and drops stale ones of crashed runs.

    Called under the run lock, so no other run's staging tables can be in use.
    """
    token = secrets.token_hex(4)
    staging = Staging(
        stream_daily=f"{MARTS_SCHEMA}.{STAGE_PREFIX}stream_daily_{token}",
        daily=f"{MARTS_SCHEMA}.{STAGE_PREFIX}daily_{token}",
        truncations=f"{MARTS_SCHEMA}.{STAGE_PREFIX}truncations_{token}",
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
        await c.execute(f"CREATE UNLOGGED TABLE {staging.stream_daily} (LIKE {STREAM_DAILY_TABLE})")
        await c.execute(f"CREATE UNLOGGED TABLE {staging.daily} (LIKE {DAILY_TABLE})")
        await c.execute(
            f"CREATE UNLOGGED TABLE {staging.truncations} "
            "(stream_id bigint NOT NULL, date date NOT NULL, truncated_bytes bigint NOT NULL, "
            "bytes_delta bigint NOT NULL)"
        )
        await c.execute(f"CREATE UNLOGGED TABLE {staging.touched} (stream_id bigint PRIMARY KEY)")

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


def commit(control: Control, staging: Staging, run: RunRecord, previous_run_id: int | None) -> int:
    """Replaces the marts' rows of days >= run.recomputed_from and records the run, atomically.

    `previous_run_id` is the newest run of any lake when this one started: truncation
    observations form one chain, so any run committed since then (only possible if the run
    lock was bypassed) makes this one fail with PipelineBusy, changing nothing.
    """

    async def go(c: asyncpg.Connection) -> int:
        async with c.transaction():
            await c.execute(f"LOCK TABLE {MARTS_SCHEMA}.pipeline_runs IN SHARE ROW EXCLUSIVE MODE")
            latest = await c.fetchval(f"SELECT max(run_id) FROM {MARTS_SCHEMA}.pipeline_runs")
            if latest != previous_run_id:
                raise PipelineBusy(f"run {latest} committed while this run was computing; run again")
            run_id: int = await c.fetchval(
                f"""INSERT INTO {MARTS_SCHEMA}.pipeline_runs (lake, started_at, master, full_run,
                        read_since_ms, high_water_ms, recomputed_from, rows_read, facts_written)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING run_id""",
                run.lake,
                run.started_at,
                run.master,
                run.full_run,
                run.read_since_ms,
                run.high_water_ms,
                run.recomputed_from,
                run.rows_read,
                run.facts_written,
            )
            await c.execute(
                f"INSERT INTO {OBSERVATIONS_TABLE} (run_id, stream_id, date, truncated_bytes, bytes_delta) "
                f"SELECT $1, stream_id, date, truncated_bytes, bytes_delta FROM {staging.truncations}",
                run_id,
            )
            if run.recomputed_from is not None:
                await _replace_days(c, staging, run.recomputed_from)
            await c.execute(f"DROP TABLE {staging.all()}")
            return run_id

    return control.call(go)


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
    await c.execute(f"INSERT INTO {STREAM_DAILY_TABLE} SELECT * FROM {staging.stream_daily}")
    await c.execute(f"INSERT INTO {DAILY_TABLE} SELECT * FROM {staging.daily}")
    await c.execute(f"DELETE FROM {TOTALS_TABLE} t USING {staging.touched} g WHERE t.stream_id = g.stream_id")
    await c.execute(_REFRESH_TOTALS.format(touched=staging.touched))


def drop_staging(control: Control, staging: Staging) -> None:
    control.call(lambda c: c.execute(f"DROP TABLE IF EXISTS {staging.all()}"))
