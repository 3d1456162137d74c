"""Applies Alembic migrations to head; used by `pgcontroller db upgrade` and at `serve` start.

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

from app.store.pool import asyncpg_dsn

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
    cfg.attributes["url"] = "postgresql+asyncpg://" + asyncpg_dsn(url).split("://", 1)[1]
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


def upgrade_to_head(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


async def current_revision(conn: asyncpg.Connection) -> str | None:
    """The revision stamped in the database, read over an existing asyncpg connection."""
    exists = await conn.fetchval("SELECT to_regclass('alembic_version') IS NOT NULL")
    if not exists:
        return None
    value: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return value


async def ensure_schema(url: str) -> bool:
    """Upgrades when the database is behind; returns True if a migration ran."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        current = await current_revision(conn)
    finally:
        await conn.close()
    if current == head_revision():
        return False
    await asyncio.to_thread(upgrade_to_head, url)
    return True
