"""The pipeline's own bookkeeping in `reporting_marts`: one row per successful run, the run
lock, who may read the schema, and the control connection that creates the schema and commits
a run atomically.

Invariant: a run's row in `pipeline_runs` (its high-water mark) is inserted in the same SQL
transaction that replaces the mart rows it recomputed, so the next run starts exactly where a
committed run ended; a crash before that commit leaves the previous state, and the rerun
recomputes the same days (every write is a replacement, so nothing is counted twice).

Runs are serialized by a row lock on `pipeline_lock`, held by a second connection for the
whole run (not an advisory lock: `db create-analyst` takes those functions from PUBLIC, and
the pipeline may run as a role that owns only this schema). If that connection dies, the
commit's check that no other run committed meanwhile (marts.commit) still keeps runs apart.

Readers: the analysts' group (when the database has it) and the `--grant-to` roles get USAGE on
the schema and SELECT on its tables, now and (default privileges) on the tables the pipeline's
role creates later; never anything that writes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

import asyncpg

from pgurl import connect_kwargs
from spark.config import ANALYST_GROUP, MARTS_SCHEMA

T = TypeVar("T")

RUNS_DDL = f"""
CREATE TABLE IF NOT EXISTS {MARTS_SCHEMA}.pipeline_runs (
    run_id bigserial PRIMARY KEY,
    lake text NOT NULL,
    started_at timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    master text NOT NULL,
    full_run boolean NOT NULL,
    read_since_ms bigint NOT NULL,
    high_water_ms bigint NOT NULL,
    recomputed_from date,
    rows_read bigint NOT NULL,
    facts_written bigint NOT NULL,
    facts_version text
)
"""
# Runs recorded before versions were (spark.facts.FACTS_VERSION) have none: never current.
RUNS_UPGRADE = f"ALTER TABLE {MARTS_SCHEMA}.pipeline_runs ADD COLUMN IF NOT EXISTS facts_version text"
LOCK_DDL = [
    f"CREATE TABLE IF NOT EXISTS {MARTS_SCHEMA}.pipeline_lock (id smallint PRIMARY KEY CHECK (id = 1))",
    f"INSERT INTO {MARTS_SCHEMA}.pipeline_lock VALUES (1) ON CONFLICT DO NOTHING",
]
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_$]{0,62}$")


class PipelineBusy(RuntimeError):
    """Another pipeline run holds the run lock, or committed while this one was running."""


class MartsForbidden(RuntimeError):
    """The pipeline's role may not create or write the `reporting_marts` schema."""


@dataclass(frozen=True)
class LastRun:
    run_id: int
    high_water_ms: int
    recomputed_from: date | None
    facts_version: str | None


def _forbidden(exc: Exception) -> MartsForbidden:
    return MartsForbidden(
        f"this role may not create or write schema {MARTS_SCHEMA} ({exc}). Run the pipeline as the "
        f"database owner, or have the owner run CREATE SCHEMA {MARTS_SCHEMA} AUTHORIZATION <role> "
        "(see spark/README.md)"
    )


async def grant_reads(c: asyncpg.Connection, readers: Sequence[str]) -> None:
    """USAGE and SELECT only: readers can neither write the marts nor create in the schema.
    The default privileges cover tables this role creates later (a table a newer pipeline
    replaces or adds), so no reader loses the marts between two runs."""
    for role in readers:
        await c.execute(f"GRANT USAGE ON SCHEMA {MARTS_SCHEMA} TO {role}")
        await c.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {MARTS_SCHEMA} TO {role}")
        await c.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {MARTS_SCHEMA} GRANT SELECT ON TABLES TO {role}")


class Control:
    """Two asyncpg connections driven synchronously (the Spark driver is not an asyncio program):
    one for the schema and the commit, one holding the run lock until close()."""

    def __init__(self, db_url: str) -> None:
        self._runner = asyncio.Runner()
        self._lock_conn: asyncpg.Connection | None = None
        # The roles granted reads by grant_to_readers (the ones that exist), for tables made later.
        self.readers: tuple[str, ...] = ()
        try:
            self._conn: asyncpg.Connection = self._run(asyncpg.connect(**connect_kwargs(db_url)))
        except BaseException:
            self._runner.close()
            raise
        self._url = db_url

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def call(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        async def go() -> T:
            return await fn(self._conn)

        return self._run(go())

    def close(self) -> None:
        try:
            for conn in (self._lock_conn, self._conn):
                if conn is not None:
                    self._run(conn.close())
        finally:
            self._runner.close()

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema and lock -----------------------------------------------------------------------

    def ensure_schema(self, table_ddl: Sequence[str]) -> None:
        """Creates `reporting_marts` and its tables when missing.

        The schema is created only when absent: a role that owns an existing schema but lacks
        CREATE on the database can still run the pipeline. A table of an older shape is left
        for the run to replace (marts.commit), under the run lock and atomically with its facts.
        """

        async def go(c: asyncpg.Connection) -> None:
            async with c.transaction():
                exists = await c.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", MARTS_SCHEMA
                )
                if not exists:
                    await c.execute(f"CREATE SCHEMA {MARTS_SCHEMA}")
                for ddl in [RUNS_DDL, RUNS_UPGRADE, *LOCK_DDL, *table_ddl]:
                    await c.execute(ddl)

        self._schema_call(go)

    def grant_to_readers(self, readers: Sequence[str] = ()) -> None:
        """Grants reads on the schema to the analysts' group when it exists and to `readers`
        (which must exist); remembers them (`self.readers`) for the tables the run makes.

        Called under the run lock: no other run's staging tables are there to be granted."""
        for role in readers:
            if not _ROLE_NAME.match(role):
                raise ValueError(f"not a plain role name: {role!r}")

        async def go(c: asyncpg.Connection) -> tuple[str, ...]:
            async with c.transaction():
                group = await c.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", ANALYST_GROUP
                )
                granted = tuple(dict.fromkeys([*([ANALYST_GROUP] if group else []), *readers]))
                await grant_reads(c, granted)
                return granted

        self.readers = self._schema_call(go)

    def _schema_call(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        try:
            return self.call(fn)
        except (asyncpg.InsufficientPrivilegeError, asyncpg.ReadOnlySQLTransactionError) as exc:
            # Read-only: an analyst's sessions are, by default; it is not a pipeline role either.
            raise _forbidden(exc) from exc
        except asyncpg.UndefinedObjectError as exc:
            raise ValueError(f"cannot grant reads on {MARTS_SCHEMA}: {exc}") from exc

    def acquire_run_lock(self) -> None:
        async def go() -> None:
            conn = await asyncpg.connect(**connect_kwargs(self._url))
            self._lock_conn = conn
            await conn.execute("BEGIN")
            try:
                await conn.execute(
                    f"SELECT 1 FROM {MARTS_SCHEMA}.pipeline_lock WHERE id = 1 FOR UPDATE NOWAIT"
                )
            except asyncpg.LockNotAvailableError:
                raise PipelineBusy("another pipeline run is in progress on this database") from None
            except asyncpg.InsufficientPrivilegeError as exc:
                raise _forbidden(exc) from exc

        self._run(go())

    # -- runs ----------------------------------------------------------------------------------

    def last_run(self, lake: str) -> LastRun | None:
        row = self.call(
            lambda c: c.fetchrow(
                "SELECT run_id, high_water_ms, recomputed_from, facts_version "
                f"FROM {MARTS_SCHEMA}.pipeline_runs WHERE lake = $1 ORDER BY run_id DESC LIMIT 1",
                lake,
            )
        )
        if row is None:
            return None
        return LastRun(row["run_id"], row["high_water_ms"], row["recomputed_from"], row["facts_version"])

    def latest_run_id(self) -> int | None:
        """The newest run of any lake (the chain a commit must extend)."""
        value = self.call(lambda c: c.fetchval(f"SELECT max(run_id) FROM {MARTS_SCHEMA}.pipeline_runs"))
        return None if value is None else int(value)
