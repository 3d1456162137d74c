"""Migrations against the declared schema, on databases created here from scratch.

These databases are made with a plain CREATE DATABASE (template0), never from the suite's
migrated template, so the migrations themselves build everything that is compared.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.segmentstore.storage import AppendRequest
from app.store import migrate
from app.store.pool import asyncpg_dsn, create_pool
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock
from migrations import schema
from tests.support.db import with_database


async def _admin(pg_admin_url: str, sql: str) -> None:
    conn = await asyncpg.connect(pg_admin_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
async def empty_db_url(pg_admin_url: str) -> AsyncIterator[str]:
    name = f"mig_{uuid.uuid4().hex[:12]}"
    await _admin(pg_admin_url, f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield with_database(pg_admin_url, name)
    finally:
        await _admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _diff(sync_conn: Connection) -> list[Any]:
    context = MigrationContext.configure(
        sync_conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return list(compare_metadata(context, schema.metadata))


async def schema_diff(url: str) -> list[Any]:
    engine = create_async_engine(
        "postgresql+asyncpg://" + asyncpg_dsn(url).split("://", 1)[1], poolclass=pool.NullPool
    )
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_diff)
    finally:
        await engine.dispose()


async def user_tables(url: str) -> set[str]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return {r["tablename"] for r in rows}


async def stamped_revision(url: str) -> str | None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return await migrate.current_revision(conn)
    finally:
        await conn.close()


DECLARED_TABLES = set(schema.metadata.tables)


async def test_empty_database_has_no_tables(empty_db_url: str) -> None:
    assert await user_tables(empty_db_url) == set()
    assert await stamped_revision(empty_db_url) is None


async def test_upgrade_to_head_matches_the_declared_schema(empty_db_url: str) -> None:
    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)

    assert await user_tables(empty_db_url) == DECLARED_TABLES | {"alembic_version"}
    assert await stamped_revision(empty_db_url) == migrate.head_revision()
    diff = await schema_diff(empty_db_url)
    assert diff == [], f"migrations and migrations/schema.py disagree: {diff}"


async def test_compare_detects_drift(empty_db_url: str) -> None:
    # The comparison is live: a column the declared schema lacks is reported.
    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)
    conn = await asyncpg.connect(asyncpg_dsn(empty_db_url))
    try:
        await conn.execute("ALTER TABLE scopes ADD COLUMN extra integer")
    finally:
        await conn.close()
    diff = await schema_diff(empty_db_url)
    # ("remove_column", schema, table, Column): the database has a column the metadata lacks.
    assert [(d[0], d[2], d[3].name) for d in diff] == [("remove_column", "scopes", "extra")]


async def test_downgrade_to_base_then_upgrade_again(empty_db_url: str) -> None:
    cfg = migrate.alembic_config(empty_db_url)
    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)

    await asyncio.to_thread(command.downgrade, cfg, "base")
    assert await user_tables(empty_db_url) <= {"alembic_version"}
    assert await stamped_revision(empty_db_url) is None

    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)
    assert await user_tables(empty_db_url) == DECLARED_TABLES | {"alembic_version"}
    assert await stamped_revision(empty_db_url) == migrate.head_revision()
    assert await schema_diff(empty_db_url) == []


async def test_downgrade_past_0026_unpacks_the_chunks_the_store_packed(empty_db_url: str) -> None:
    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)
    segment = "scope/stream/0.#epoch.0"
    text = b"".join(f"e000:{i:08d}|".encode().ljust(1024, b"x") for i in range(300))
    noise = os.urandom(70_000)
    pool = await create_pool(empty_db_url, min_size=1, max_size=2)
    try:
        storage = PgSegmentStorage(pool, ManualClock(5_000))
        await storage.create_segment(segment, "stream", 0, 0, 0)
        await storage.append(AppendRequest(segment, 1, text, 1, 300))
        await storage.append(AppendRequest(segment, 1, noise, 2, 1))
        packed = await pool.fetchval("SELECT count(*) FROM segment_chunks WHERE lz4_length IS NOT NULL")
        assert packed == 1
    finally:
        await pool.close()

    await asyncio.to_thread(command.downgrade, migrate.alembic_config(empty_db_url), "0025")
    conn = await asyncpg.connect(asyncpg_dsn(empty_db_url))
    try:
        rows = await conn.fetch(
            "SELECT data, pg_column_compression(data) AS method FROM segment_chunks ORDER BY start_offset"
        )
        columns = await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'segment_chunks'::regclass AND attnum > 0"
            " AND NOT attisdropped"
        )
    finally:
        await conn.close()
    # As 0021 stored them: PostgreSQL's lz4 TOAST for what compresses.
    assert [(bytes(r["data"]), r["method"]) for r in rows] == [(text, "lz4"), (noise, None)]
    assert "lz4_length" not in {c["attname"] for c in columns}

    await asyncio.to_thread(migrate.upgrade_to_head, empty_db_url)
    pool = await create_pool(empty_db_url, min_size=1, max_size=2)
    try:
        assert (
            await PgSegmentStorage(pool, ManualClock(5_000)).read(segment, 0, 1 << 20)
        ).data == text + noise
    finally:
        await pool.close()


async def test_ensure_schema_on_an_up_to_date_database(db_url: str) -> None:
    before = await stamped_revision(db_url)
    assert before == migrate.head_revision()
    assert await migrate.ensure_schema(db_url) is False
    assert await stamped_revision(db_url) == before


async def test_ensure_schema_on_an_empty_database(empty_db_url: str) -> None:
    assert await migrate.ensure_schema(empty_db_url) is True
    assert await stamped_revision(empty_db_url) == migrate.head_revision()
    assert await user_tables(empty_db_url) == DECLARED_TABLES | {"alembic_version"}
    assert await migrate.ensure_schema(empty_db_url) is False


async def test_defect_8_concurrent_ensure_schema_calls_migrate_an_empty_database_once(
    empty_db_url: str,
) -> None:
    results = await asyncio.gather(*(migrate.ensure_schema(empty_db_url) for _ in range(4)))
    assert sorted(results) == [False, False, False, True], "exactly one call migrates, the others wait"
    assert await stamped_revision(empty_db_url) == migrate.head_revision()
    assert await schema_diff(empty_db_url) == []


async def test_defect_8_concurrent_db_upgrade_processes_all_succeed(empty_db_url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "db",
            "upgrade",
            "--db-url",
            empty_db_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        for _ in range(3)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in processes)), timeout=120)
    for process, (output, _) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output.decode(errors="replace")
    assert await stamped_revision(empty_db_url) == migrate.head_revision()
    assert await schema_diff(empty_db_url) == []
