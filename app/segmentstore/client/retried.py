"""A users' client's request (the key-value table client's, the stream client's) to the store
that owns a segment, retried where the store cannot have decided it, as Pravega's clients retry.

Invariant: only what the store did not decide is retried (a lost connection or a timeout,
WrongHost, an expired delegation token), against the endpoint asked of the controller afresh
and with a renewed token, at most ATTEMPTS times; every other reply goes back to the caller,
which alone knows what its refusals mean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.segmentstore.client.connections import ConnectionPool, next_request_id
from app.segmentstore.wire import commands as wc

ATTEMPTS: Final = 4
BACKOFF_S: Final = 0.05
# WireCommands.AuthTokenCheckFailed.ErrorCode.TOKEN_EXPIRED.
TOKEN_EXPIRED: Final = 1

# The owner's endpoint; `refresh`: ask the controller again (the last one failed or disowned it).
Resolve = Callable[[bool], Awaitable[HostAddress]]
# The delegation token to send; `refresh`: the store said the last one expired.
Token = Callable[[bool], Awaitable[str]]
# A command for a request id and a token.
Build = Callable[[int, str], wc.Command]


class NoAnswer(Exception):
    """Every attempt ended undecided; the message says how the last one did."""


async def request_retried(
    pool: ConnectionPool, resolve: Resolve, token: Token, builds: Sequence[Build]
) -> tuple[list[wc.Command], list[wc.Command]]:
    """The commands of the first attempt the store decided, pipelined on one connection, and
    their replies in order; NoAnswer after ATTEMPTS undecided ones."""
    last = ""
    expired = False
    for attempt in range(ATTEMPTS):
        if attempt:
            await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
        try:
            endpoint = await resolve(attempt > 0)
            current = await token(expired)
            commands = [build(next_request_id(), current) for build in builds]
            replies = await pool.request_many(endpoint, commands)
        except StoreUnavailable as exc:
            last = str(exc)
            continue
        expired = any(
            isinstance(r, wc.AuthTokenCheckFailed) and r.error_code == TOKEN_EXPIRED for r in replies
        )
        if expired:
            last = "the delegation token expired"
            continue
        wrong = next((r for r in replies if isinstance(r, wc.WrongHost)), None)
        if wrong is not None:
            last = f"{endpoint} does not own it (it names {wrong.correct_host!r})"
            continue
        return commands, replies
    raise NoAnswer(f"no answer after {ATTEMPTS} attempts: {last}")
