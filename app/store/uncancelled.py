"""Connections that drop a query they give up on instead of cancelling it.

asyncpg answers a command timeout, or the cancellation of the task awaiting a query, with a
CancelRequest to the server. PostgreSQL honours a cancel that reaches a COMMIT while it waits for
a synchronous standby by ending the wait with a WARNING: "The transaction has already committed
locally, but might not have been replicated to the standby". The transaction is then visible on
that server though no standby has it. After a failover that server is the old primary, still
writable while its Patroni is frozen, and another of the pool's connections may still be on it:
a read there (a SetupAppend's writer event number, a segment's bytes) answers with a write that
the rewind will discard. Seen in tests/e2e/test_ha_frozen_patroni.py: an append timed out after
30 s, its cancel made it visible on the old primary, the writer's SetupAppend was answered from
there with that append's event number, so the client never sent it again, and the event was lost.

Dropping the connection instead leaves the backend waiting for the standby, its transaction
invisible (it is still in progress to every other session), until the standby answers (the write
is then durable) or the server stops (a demoted primary's rewind removes it). What this costs: a
statement the server is still running when it is given up on runs to its end, and an autocommit
statement or pipeline may then commit. That is the outcome of any connection lost mid-statement,
which every write here already tolerates (idempotent steps, versioned rows, and
app/store/commit_outcome.py for the conditional table writes); a cancelled one rolled back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

log = logging.getLogger("pgcontroller.store.uncancelled")


class UncancelledConnection(asyncpg.Connection):  # type: ignore[misc]
    """asyncpg's connection, but a query given up on closes it rather than sending a cancel."""

    _given_up = False

    def is_closed(self) -> bool:
        # Closed from the moment a query is given up on: the pool and the lender never lend it
        # again, a query started on it fails at once (rather than queue behind the one given
        # up on, whose backend may wait for good), and the pool terminates it when it is given
        # back (not sooner: terminating a lent connection frees its pool slot under the borrower).
        return self._given_up or bool(super().is_closed())

    async def close(self, *, timeout: float | None = None) -> None:  # noqa: ASYNC109 - asyncpg's signature
        if self._given_up:
            self.terminate()  # nothing to say to a backend that may never read it
            return
        await super().close(timeout=timeout)

    # asyncpg calls this (its protocol's _request_cancel) for a command timeout, a cancelled
    # awaiting task, and a close with a query running: the one place a CancelRequest starts.
    def _cancel_current_command(self, waiter: asyncio.Future[Any], cancel_waiter: Any = None) -> None:
        if not self._given_up:
            self._given_up = True
            log.warning(
                "a query was given up on (timed out or cancelled): its connection to the database "
                "is closed, not the query cancelled, so that a COMMIT waiting for a synchronous "
                "standby stays invisible (backend pid %s)",
                self.get_server_pid(),
            )
        # Not at once: asyncpg's caller still uses the protocol after this returns.
        self._loop.call_soon(self._instead_of_cancel, waiter, cancel_waiter)

    def _instead_of_cancel(self, waiter: asyncio.Future[Any], cancel_waiter: Any) -> None:
        # asyncpg waits for these before the connection's next step: as if the cancel was sent.
        for future in (waiter, cancel_waiter):
            if isinstance(future, asyncio.Future) and not future.done():
                future.set_result(None)
        # A pool's connection is terminated when given back (is_closed above); one of our own
        # sessions now.
        if self._pool_holder is None and not self._aborted:
            self.terminate()
