"""Waiting for an asynchronous workflow, as Pravega's API does (EventHelper#checkDone).

The predicate reads the metadata; polling starts fast and backs off, and the whole wait is
bounded (the configured completion timeout), after which the caller gets Timeout (DEADLINE_EXCEEDED).
A workflow whose request was parked (a final failure) ends the wait at once with FinalFailure, so
the caller answers its RPC's failure status instead of waiting for the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.domain.errors import FinalFailure, Timeout
from app.domain.requests import RequestKind
from app.ports import RequestQueue


@dataclass(frozen=True, slots=True)
class RequestWatch:
    """The request a caller waits for: of this key and kind, parked at or after `since_ms` (taken
    before the caller wrote its request or joined one in flight; one of a kind runs at a time)."""

    requests: RequestQueue
    scope: str
    stream: str
    kind: RequestKind
    since_ms: int

    async def parked(self) -> str | None:
        """Why the request failed, once it is parked."""
        row = await self.requests.parked_since(self.scope, self.stream, self.kind, self.since_ms)
        return None if row is None else (row.last_error or "the workflow failed")

    async def settled(self) -> str | None:
        """For metadata that looks done: None when no request of the kind is left in the queue,
        the failure when it was parked, or raises _Running while one still is. A rollback makes the
        metadata look done before its request is parked; reading the queue before the parked rows
        means a request parked between the two reads is still seen (parking and acknowledging
        both take a row out of the queue, atomically)."""
        if await self.requests.has_pending(self.scope, self.stream, self.kind):
            raise _Running
        return await self.parked()


class _Running(Exception):
    """The request is still queued (not parked): keep waiting."""


def parked_request(
    requests: RequestQueue, scope: str, stream: str, kind: RequestKind, since_ms: int
) -> RequestWatch:
    return RequestWatch(requests, scope, stream, kind, since_ms)


async def wait_until(
    done: Callable[[], Awaitable[bool]],
    what: str,
    *,
    timeout_s: float,
    failed: RequestWatch | None = None,
    first_poll_s: float = 0.005,
    max_poll_s: float = 0.5,
) -> None:
    deadline = time.monotonic() + timeout_s
    poll_s = first_poll_s
    while True:
        reason: str | None = None
        if await done():
            if failed is None:
                return
            try:
                reason = await failed.settled()
            except _Running:
                pass  # done-looking metadata while its request is still queued: a rollback
            else:
                if reason is None:
                    return
        elif failed is not None:
            reason = await failed.parked()
        if reason is not None:
            raise FinalFailure(f"{what} failed and its request is parked: {reason}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"{what} did not complete within {timeout_s:g} s; it continues in the background")
        await asyncio.sleep(min(poll_s, remaining))
        poll_s = min(poll_s * 2, max_poll_s)
