"""A throwaway PostgreSQL for the suite: one cluster, one migrated template, a clone per test."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

import pgurl
from app.embedded_pg import EmbeddedPostgres
from app.store.migrate import upgrade_to_head
from tests.support.scratch import scratch_dir

TEMPLATE = "pgc_template"
_counter = itertools.count()


@contextmanager
def throwaway_cluster() -> Iterator[EmbeddedPostgres]:
    root = scratch_dir("pgcontroller-tests-")
    cluster = EmbeddedPostgres(root / "data", fast=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def with_database(url: str, database: str) -> str:
    """`url` naming `database` instead (its query, e.g. the passfile, kept)."""
    return pgurl.parse(url).with_database(database).to_url()


async def create_template(admin_url: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, with_database(admin_url, TEMPLATE))


async def clone_database(admin_url: str) -> str:
    name = f"t{os.getpid()}_{next(_counter)}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    finally:
        await conn.close()
    return name


async def drop_database(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()
