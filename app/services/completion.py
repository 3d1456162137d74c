"""Waiting for an asynchronous workflow, as Pravega's API does (EventHelper#checkDone).

The predicate reads the metadata; polling starts fast and backs off, and the whole wait is
bounded (the configured completion timeout), after which the caller gets Timeout (DEADLINE_EXCEEDED).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from app.domain.errors import Timeout


async def wait_until(
    done: Callable[[], Awaitable[bool]],
    what: str,
    *,
    timeout_s: float,
    first_poll_s: float = 0.005,
    max_poll_s: float = 0.5,
) -> None:
    deadline = time.monotonic() + timeout_s
    poll_s = first_poll_s
    while True:
        if await done():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"{what} did not complete within {timeout_s:g} s; it continues in the background")
        await asyncio.sleep(min(poll_s, remaining))
        poll_s = min(poll_s * 2, max_poll_s)
