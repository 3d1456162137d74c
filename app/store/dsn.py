"""The store's door to PostgreSQL connection settings: a libpq URL (pgurl) turned into asyncpg's
arguments, for the pool, dedicated sessions, the LISTEN connection, migrations and analysts.
Invariant: every asyncpg connection of the service is opened from these arguments, and a URL
that cannot be used is InvalidInput whose message names the fault and never the password.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from app.domain.errors import InvalidInput
from app.store import hosts
from pgurl import PgUrlError, connect_kwargs, masked

__all__ = ["connect_args", "masked", "open_connection"]


def connect_args(url: str, *, application_name: str | None = None) -> dict[str, Any]:
    """asyncpg.connect/create_pool keyword arguments for `url` (libpq forms, SQLAlchemy's
    postgresql+asyncpg:// too). `application_name` applies when the URL names none."""
    try:
        return connect_kwargs(url, application_name=application_name)
    except PgUrlError as exc:
        raise InvalidInput(f"database URL {masked(url)}: {exc}") from None


async def open_connection(url: str, **options: Any) -> asyncpg.Connection:
    """A raw asyncpg connection (for the few callers that need asyncpg's own errors)."""
    return await hosts.connect(**connect_args(url), **options)
