"""Applies Alembic migrations to head; used by `pgcontroller db upgrade` and at `serve` start.

Runs in a worker thread because Alembic drives its own event loop over asyncpg.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.store.pool import asyncpg_dsn

_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    cfg = Config(str(_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(_ROOT / "migrations"))
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
