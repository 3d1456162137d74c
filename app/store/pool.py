"""The runtime pool (a Database, app/store/db.py) and its per-connection setup (JSON codecs,
timeouts). Every runtime query goes through one pool; a statement that runs longer than the
command timeout is abandoned rather than holding an RPC forever.
"""

from __future__ import annotations

import json

import asyncpg

from app.store.db import PgDatabase, open_pool


def asyncpg_dsn(url: str) -> str:
    """SQLAlchemy's postgresql+asyncpg:// spelling as plain libpq (for callers handing a URL to
    asyncpg themselves; the service's own connections take app/store/dsn.py's arguments)."""
    for prefix in ("postgresql+asyncpg://", "postgres+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


async def _setup_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await conn.set_type_codec("json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool connections carry no session state (advisory locks and LISTEN use dedicated
    connections), so the default reset, one extra round trip per query, buys nothing."""


async def create_pool(
    url: str, *, max_size: int, min_size: int = 2, command_timeout: float = 30.0
) -> PgDatabase:
    """`max_size` is the pool_max_size setting (or a test's own bound): its default lives there."""
    return await open_pool(
        url,
        min_size=min_size,
        max_size=max_size,
        command_timeout=command_timeout,
        init=_setup_connection,
        reset=_keep_session,
        # JIT off: the controller's statements read a handful of rows, but on a long history
        # (31M epochs) the planner's row guesses price some of them past jit_above_cost, and
        # compiling then costs seconds per call. A URL's own options still win.
        server_settings={"application_name": "pgcontroller", "jit": "off"},
    )
