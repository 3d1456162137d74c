"""Bounded waits that never lose a cancellation: on an asyncio.Event, and on any awaitable.

Python 3.11's `asyncio.wait_for` returns the inner result when a cancellation arrives in the same
loop turn as the awaited event is set: the cancellation is lost (fixed in 3.12). A background
loop waiting on its wake-up event that way can miss its shutdown and wait for ever, and the
stopped process with it. `asyncio.timeout` cancels the waiting task itself and tells its own
cancellation from an outside one, so an outside cancellation always propagates."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """True once `event` is set, False when `timeout_s` passed first."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def bounded(awaitable: Awaitable[T], limit_s: float) -> T:
    """`await awaitable`, cancelled and TimeoutError after `limit_s` seconds: asyncio.wait_for's
    contract, minus its loss of a cancellation that arrives as the awaitable completes."""
    async with asyncio.timeout(limit_s):
        return await awaitable
