"""Alembic environment: runs migrations over a synchronous psycopg-free driver via asyncpg.

The URL is passed in by app.store.migrate through the Alembic config attributes (that module
builds the whole configuration), so no secret ever sits in a file.
"""

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.store import hosts
from app.store.dsn import connect_args
from migrations.reporting import build_reporting, drop_reporting
from migrations.schema import metadata

config = context.config


def _do_run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        drop_reporting(connection)
        context.run_migrations()
        if _at_head(connection):
            build_reporting(connection)


def _at_head(connection: Connection) -> bool:
    head = context.script.get_current_head()
    current = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    return current is not None and current == head


async def _run_async(url: str) -> None:
    # SQLAlchemy would hand the URL's query (sslmode=...) to asyncpg as keywords it does not
    # take; the connections are opened from app/store/dsn.py's arguments instead.
    arguments = connect_args(url, application_name="pgcontroller-migrations")

    async def creator() -> object:
        return await hosts.connect(**arguments)

    engine = create_async_engine("postgresql+asyncpg://", poolclass=pool.NullPool, async_creator=creator)
    async with engine.connect() as connection:
        await connection.run_sync(_do_run)
    await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _do_run(connection)
        return
    url = config.attributes.get("url")
    if url is None:
        # Only `alembic` run by hand gets here: alembic.ini carries no URL, by design.
        raise SystemExit("migrations run through `pgcontroller db upgrade`, which supplies the database URL")
    asyncio.run(_run_async(url))


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; use `pgcontroller db upgrade`")
run_migrations_online()
