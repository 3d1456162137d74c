"""The readiness probe's own session: whether PostgreSQL answers now, asked on a dedicated
connection (a busy pool must not read as an outage) that reports its own loss at once.

Invariant: a session that failed or timed out is dropped, never reused; the next ping connects
afresh, so a restarted server is seen as soon as it accepts connections again. Connecting is not
cut short by a ping's bound: it goes on across pings (shielded), since with several hosts one that
drops packets takes seconds to pass over (app/store/hosts.py), far more than a ping may wait, and
a connect started afresh each ping would never get past it.
"""

from __future__ import annotations

import asyncio
import contextlib

from app.domain.errors import DomainError
from app.store.db import PgSession, connect
from app.store.pool import asyncpg_dsn


class PgProbe:
    def __init__(self, url: str) -> None:
        self._dsn = asyncpg_dsn(url)
        self._session: PgSession | None = None
        self._connecting: asyncio.Task[PgSession] | None = None
        # Set by the driver the moment the session ends (server shutdown, terminated backend),
        # so the probe loop can report the loss without waiting for its next round.
        self.lost = asyncio.Event()

    async def ping(self) -> None:
        """Returns when the server answered `SELECT 1`; StoreUnavailable when it cannot be
        reached. The caller bounds the wait; a ping cut short drops its session."""
        try:
            if self._session is None or self._session.is_closed():
                self._session = await self._connected()
            await self._session.fetchval("SELECT 1")
        except BaseException:
            self._drop()
            raise

    async def _connected(self) -> PgSession:
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done():  # a connect that ended either way is not waited on again
                self._connecting = None

    async def _connect(self) -> PgSession:
        session = await connect(self._dsn, server_settings={"application_name": "pgcontroller-probe"})
        session.add_termination_listener(lambda _session: self.lost.set())
        return session

    def _drop(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.is_closed():
            session.terminate()

    async def close(self) -> None:
        connecting, self._connecting = self._connecting, None
        if connecting is not None:
            connecting.cancel()
            await asyncio.wait([connecting])
            if not connecting.cancelled() and connecting.exception() is None:
                with contextlib.suppress(DomainError):
                    await connecting.result().close()
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(DomainError):
                await session.close()
