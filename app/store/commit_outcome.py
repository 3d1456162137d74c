"""Transactions whose COMMIT may be answered by nobody: the connection is lost (PostgreSQL crashed,
a failover, a terminated backend) after the COMMIT left and before its answer came back, so the
write may or may not be durable. For an idempotent write, "unavailable, retry" is the right
answer either way. For a conditional one it is not: the caller's retry of a write that did
commit fails its own condition, and a client that then re-derives its write from the table it
reads back finds its change already there and cannot explain it (the Rust client's reader group
panics: "should have assigned this segment to reader", when completing a segment twice).

So such a transaction takes its id first, and a COMMIT that fails on the connection is looked up
by that id (`txid_status`, PostgreSQL's answer to exactly this question) once the server answers
again: committed is success, the caller's result stands; aborted, or still not known at the
deadline, is the outage it was.

The id is looked up only on the server, and timeline, that gave it (sql/queries/commit_outcome.sql):
after a failover the pool's connections go to the new primary, where the same id may belong to
another transaction, committed, while this one waits on the old primary to be rewound away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from app.domain.errors import StoreUnavailable
from app.store import queries
from app.store.db import Connection, Database

log = logging.getLogger("pgcontroller.store.commit-outcome")

_SQL = queries.load("commit_outcome")

# How long a write whose COMMIT lost its answer waits for the server to say what became of it:
# past a crash's recovery (seconds) and within a client's request timeout (the Rust client's is
# 30 s), after which the caller retries and this answer would reach nobody.
OUTCOME_WAIT_S = 20.0
# Between asking, while the server is away or the transaction still in progress.
_ASK_EVERY_S = 0.2

Outcome = Literal["committed", "aborted", "in progress"]


@dataclass(frozen=True, slots=True)
class KnownTransaction:
    xid: int
    # Where `xid` means this transaction: the server's address and port, and its timeline.
    server: str


async def known_transaction(conn: Connection) -> KnownTransaction:
    """The id of the transaction open on `conn` (assigned now if it had none), and its server."""
    row = await conn.fetchrow(_SQL["transaction_id"])
    assert row is not None
    return KnownTransaction(int(row["xid"]), str(row["server"]))


async def outcome(db: Database, known: KnownTransaction) -> Outcome | None:
    """What became of the transaction: None when the server asked is not the one it ran on (a
    failover since), or no longer knows (an id so old its status was truncated away)."""
    row = await db.fetchrow(_SQL["transaction_status"], known.xid, known.server)
    return None if row is None else row["status"]


async def settled_outcome(db: Database, known: KnownTransaction, wait_s: float) -> Outcome | None:
    """The outcome once it is final (not in progress), asking until `wait_s` passed; "in progress"
    or None (the server, or the one it ran on, never answered) at the deadline."""
    deadline = time.monotonic() + wait_s
    last: Outcome | None = None
    while True:
        left = deadline - time.monotonic()
        # The server away or slow to answer: asked again below, until the deadline.
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(max(left, _ASK_EVERY_S)):
                last = await outcome(db, known)
        if last in ("committed", "aborted") or time.monotonic() >= deadline:
            return last
        await asyncio.sleep(_ASK_EVERY_S)


@asynccontextmanager
async def transaction_with_known_outcome(
    db: Database, *, wait_s: float = OUTCOME_WAIT_S
) -> AsyncIterator[Connection]:
    """A pooled connection with a transaction open on it for the block, like
    `Database.transaction()`, except that a COMMIT whose answer is lost and which did commit ends
    the block normally. Only the COMMIT is looked up: a failure inside the block rolled it back."""
    async with db.acquire() as conn:
        block = conn.transaction()
        await block.__aenter__()
        try:
            known = await known_transaction(conn)
            yield conn
        except BaseException as exc:
            await block.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        try:
            await block.__aexit__(None, None, None)
        except StoreUnavailable as lost:
            found = await settled_outcome(db, known, wait_s)
            if found != "committed":
                log.warning(
                    "a COMMIT lost its answer and its transaction %d (on %s) is %s: the write is "
                    "refused as unavailable",
                    known.xid,
                    known.server,
                    found or "not known",
                )
                raise
            log.warning(
                "a COMMIT lost its answer but its transaction %d committed: the write stands (%s)",
                known.xid,
                lost,
            )
