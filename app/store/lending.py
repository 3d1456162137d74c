"""Pooled connections lent again without a round through asyncpg's pool.

asyncpg's pool costs about as much CPU per query as the query's own round trip does on our side
(measured: 80 of 180 µs per `SELECT 1` on the 2-core bench machine): each release runs in a task
of its own under `asyncio.shield`, resets the session, re-arms an inactivity timer, and each
acquire goes through a queue. The data path borrows a connection for every group commit and
every read, and the controller for each statement, so that cost is paid on every acknowledgement
and every transaction. The lender keeps the connections its borrowers gave back cleanly (idle, no
transaction open) checked out of the pool, and lends them straight
away; anything else goes back through the pool, which does its cleanup as before.

Invariant: a connection is idle here only while no borrower waits on the pool (a borrower waits
there only when none is idle here, and while one waits, every connection given back goes to the
pool, which hands it over); so nobody waits while a connection sits unused. A connection idle here
for longer than `idle_s` goes back to the pool at the next give-back (the pool then closes it
when it stays unused, as it closes its own). Once closing, nothing is kept or lent from here.

A borrower must not use a connection once it gave it back: asyncpg's pool refuses a released
proxy, but one kept here stays usable, so such a use would go unnoticed (app/store/db.py gives
connections back only at the end of each call and block).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import asyncpg

# Longer than any gap in steady traffic; a connection unused that long was a burst's extra.
IDLE_S = 60.0


class ConnectionLender:
    def __init__(
        self, pool: asyncpg.Pool, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._pool = pool
        self._idle_s = idle_s
        self._clock = clock
        # (connection, when it was given back): the newest on the right, lent first.
        self._idle: deque[tuple[Any, float]] = deque()
        self._waiting = 0
        self._closing = False

    def idle(self) -> int:
        return len(self._idle)

    async def lend(self) -> Any:
        """A connection of the pool (asyncpg's proxy), for one borrower until it is given back."""
        idle = self._idle
        while idle and not self._closing:
            connection = idle.pop()[0]
            if _attached(connection) and not connection.is_closed():
                return connection
            # Lost while idle (a server restart): the pool finishes its cleanup, if asyncpg's
            # own cleanup has not taken it back already.
            await self._pool.release(connection)
        self._waiting += 1
        try:
            return await self._pool.acquire()
        finally:
            self._waiting -= 1

    async def give_back(self, connection: Any, clean: bool) -> None:
        """`clean`: the borrower's block ended without an exception."""
        if clean and not self._waiting and not self._closing and _reusable(connection):
            now = self._clock()
            idle = self._idle
            idle.append((connection, now))
            if idle[0][1] < now - self._idle_s:
                await self._pool.release(idle.popleft()[0])
            return
        await self._pool.release(connection)

    async def close(self) -> None:
        """Every idle connection goes back to the pool (which can close only what it holds)."""
        self._closing = True
        while self._idle:
            await self._pool.release(self._idle.pop()[0])


def _attached(connection: Any) -> bool:
    # asyncpg detaches a proxy from its connection when it takes the connection back itself
    # (lost while lent: its cleanup returns it to the pool); the proxy then refuses every call.
    return connection._con is not None


def _reusable(connection: Any) -> bool:
    # A query given up on in the block (its timeout caught there) closed the connection
    # (app/store/uncancelled.py): the pool replaces it.
    return _attached(connection) and not connection.is_closed() and not connection.is_in_transaction()
