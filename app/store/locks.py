"""Session advisory locks on one dedicated connection (AdvisoryLocks port).

Ownership lives exactly as long as the session: when the connection drops, PostgreSQL
releases every lock it held, so the owner must treat any error here as "all locks lost".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from app.domain.errors import StoreUnavailable
from app.store.db import PgSession, connect
from app.store.pool import asyncpg_dsn
from app.waiting import bounded


class PgAdvisoryLocks:
    def __init__(
        self, url: str, *, timeout_s: float = 5.0, application_name: str = "pgcontroller-locks"
    ) -> None:
        """`application_name` names the session in pg_stat_activity: membership uses it to see
        whether a controller's lock session (and so the controller) is still connected.
        `timeout_s` bounds connecting and every statement on the session."""
        self._dsn = asyncpg_dsn(url)
        self._timeout_s = timeout_s
        self._application_name = application_name
        self._conn: PgSession | None = None
        self._lost_callbacks: list[Callable[[], None]] = []

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        self._lost_callbacks.append(callback)

    async def _connection(self) -> PgSession:
        if self._conn is None or self._conn.is_closed():
            conn = await connect(
                self._dsn,
                timeout=self._timeout_s,
                command_timeout=self._timeout_s,
                server_settings={"application_name": self._application_name},
            )
            conn.add_termination_listener(self._terminated)
            self._conn = conn
        return self._conn

    def _terminated(self, conn: PgSession) -> None:
        # Only an unexpected end matters: `reset` detaches the connection before closing it.
        if conn is self._conn:
            for callback in self._lost_callbacks:
                callback()

    async def open(self) -> None:
        """Starts a session if none is open: the only place one starts."""
        await self._connection()

    def _open_session(self) -> PgSession:
        # Never a new session here: a caller whose session died mid-way would take locks in one
        # it believes lost, which nothing would ever give back (and a leader would go on leading
        # without the leader lock). It must see the loss and start over with `open`.
        if self._conn is None or self._conn.is_closed():
            raise StoreUnavailable("the lock session is gone")
        return self._conn

    async def try_lock(self, namespace: int, key: int) -> bool:
        conn = self._open_session()
        got = await conn.fetchval("SELECT pg_try_advisory_lock($1::int, $2::int)", namespace, key)
        return bool(got)

    async def unlock(self, namespace: int, key: int) -> None:
        conn = self._open_session()
        await conn.fetchval("SELECT pg_advisory_unlock($1::int, $2::int)", namespace, key)

    async def check_alive(self) -> None:
        await self._open_session().fetchval("SELECT 1")

    async def reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await bounded(conn.close(), limit_s=1)
