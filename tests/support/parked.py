"""Waiting for a parked request: a workflow that fails for good restores its stream's state first
and parks its row a moment later, while the caller is answered as soon as the state is restored,
so a test that reads the parked rows right after the answer can come too early."""

from __future__ import annotations

import asyncio

from app.domain.requests import Request
from app.ports import RequestQueue


async def parked_soon(requests: RequestQueue, count: int = 1, timeout_s: float = 10.0) -> list[Request]:
    """The parked requests once there are `count` of them; AssertionError after `timeout_s`."""
    for _ in range(int(timeout_s / 0.02)):
        rows = await requests.list_parked(0, 100)
        if len(rows) >= count:
            return rows
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} parked request(s) expected within {timeout_s} s, found {len(rows)}")
