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

from app.domain.errors import FinalFailure, Timeout
from app.domain.requests import RequestKind
from app.ports import RequestQueue

# Returns why the workflow failed finally, or None while it has not.
FailedCheck = Callable[[], Awaitable[str | None]]


def parked_request(
    requests: RequestQueue, scope: str, stream: str, kind: RequestKind, since_ms: int
) -> FailedCheck:
    """The failure of a request of this key and kind parked at or after `since_ms` (taken before
    the caller wrote its request or joined one in flight: only one of a kind runs at a time)."""

    async def check() -> str | None:
        parked = await requests.parked_since(scope, stream, kind, since_ms)
        if parked is None:
            return None
        return parked.last_error or "the workflow failed"

    return check


async def wait_until(
    done: Callable[[], Awaitable[bool]],
    what: str,
    *,
    timeout_s: float,
    failed: FailedCheck | None = None,
    first_poll_s: float = 0.005,
    max_poll_s: float = 0.5,
) -> None:
    deadline = time.monotonic() + timeout_s
    poll_s = first_poll_s
    while True:
        # Failure first: a rolled-back workflow can look done (its intent is gone).
        if failed is not None:
            reason = await failed()
            if reason is not None:
                raise FinalFailure(f"{what} failed and its request is parked: {reason}")
        if await done():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"{what} did not complete within {timeout_s:g} s; it continues in the background")
        await asyncio.sleep(min(poll_s, remaining))
        poll_s = min(poll_s * 2, max_poll_s)
