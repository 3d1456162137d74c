"""Applies Alembic migrations to head; used by `pgcontroller db upgrade` and at `serve` start.

Processes starting together on one database migrate it once: each holds a PostgreSQL advisory
lock (on a connection of its own) while it checks the revision and upgrades; the others wait,
then find the database at head.

Runs in a worker thread because Alembic drives its own event loop over asyncpg. The Alembic
configuration is built here, not read from an alembic.ini, so an installed package migrates from
any working directory: the scripts are those of the importable `migrations` package.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.store.dsn import open_connection

MIGRATIONS_PACKAGE = "migrations"


def migrations_dir() -> Path:
    """The folder of the `migrations` package, from wherever it was imported (checkout or wheel)."""
    location = resources.files(MIGRATIONS_PACKAGE)
    # Alembic lists and loads revision files from disk, so a zipped package cannot serve.
    if not isinstance(location, Path):
        raise RuntimeError(f"the {MIGRATIONS_PACKAGE} package is not a folder on disk: {location}")
    return location


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    # The libpq URL itself: migrations/env.py opens its connections through app/store/dsn.py, so
    # sslmode and the other libpq parameters mean what they mean everywhere else.
    cfg.attributes["url"] = url
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


# The advisory-lock key every migrating process takes: "pgc-migr" in ASCII, a fixed bigint.
MIGRATION_LOCK_KEY = 0x7067632D6D696772


def upgrade_to_head(url: str) -> None:
    """Blocking (`db upgrade`): runs Alembic's upgrade even at head (it rebuilds the reporting
    views), under the migration lock like `serve`'s ensure_schema."""
    asyncio.run(_migrate(url, always=True))


def _upgrade_unlocked(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


async def current_revision(conn: asyncpg.Connection) -> str | None:
    """The revision stamped in the database, read over an existing asyncpg connection."""
    exists = await conn.fetchval("SELECT to_regclass('alembic_version') IS NOT NULL")
    if not exists:
        return None
    value: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return value


async def ensure_schema(url: str) -> bool:
    """Upgrades when the database is behind; returns True if this call ran a migration."""
    return await _migrate(url, always=False)


async def _migrate(url: str, *, always: bool) -> bool:
    conn = await open_connection(url)
    try:
        if not always and await current_revision(conn) == head_revision():
            return False  # the usual start: no lock needed to learn there is nothing to do
        # A session lock, so it spans Alembic's own connections and transactions; it goes
        # with this connection if the process dies mid-migration.
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        try:
            # Whoever held the lock before us may have migrated already.
            if not always and await current_revision(conn) == head_revision():
                return False
            await asyncio.to_thread(_upgrade_unlocked, url)
            return True
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    finally:
        await conn.close()
