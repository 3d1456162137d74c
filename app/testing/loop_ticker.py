"""A ticker on the running event loop that measures how late it wakes: the loop's responsiveness,
shared by the large-stream tests and bench/large_streams.py."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from types import TracebackType


class LoopTicker:
    """Sleeps `period_s` over and over on the running loop, recording the worst lateness: a loop
    held by synchronous work for X ms wakes the ticker about X ms late.

    Two measures: `max_late_s` in wall time (what a client feels), and `max_held_s`, the CPU time
    the loop's thread spent between asking to sleep and waking, beyond the period. Only the
    second is ours alone: on a machine shared by many processes the OS may not run this one for
    100 ms or more, which is wall lateness no code of ours causes (and which burns no CPU here)."""

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.max_late_s = 0.0
        self.max_held_s = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(self.period_s)
            self.max_late_s = max(self.max_late_s, loop.time() - asked - self.period_s)
            self.max_held_s = max(self.max_held_s, time.thread_time() - cpu - self.period_s)
            self.ticks += 1

    def describe(self) -> str:
        return f"loop held {self.max_held_s * 1000:.0f} ms of CPU; woke {self.max_late_s * 1000:.0f} ms late"

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task
