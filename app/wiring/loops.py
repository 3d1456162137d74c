"""Supervises the background loops of a serving process.

Loops run until shutdown. One that dies, or returns before shutdown was asked for, is a bug:
it is logged, and `stop` is set so the process stops (with exit code 1) rather than run half-alive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("pgcontroller")


class BackgroundLoops:
    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._tasks: list[asyncio.Task[None]] = []
        self._by_name: dict[str, asyncio.Task[None]] = {}
        self.died: list[BaseException] = []

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.create_task(self._must_not_end(name, loop), name=name)
        self._tasks.append(task)
        self._by_name[name] = task

    def running(self, name: str) -> bool | None:
        """True while the loop runs, False once it has ended, None before it was started."""
        task = self._by_name.get(name)
        return None if task is None else not task.done()

    async def cancel(self) -> None:
        """Cancels every loop and waits until each has ended."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _must_not_end(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await loop()
        except Exception as died:
            self._died(died)
            return
        if not self._stop.is_set():
            self._died(RuntimeError(f"background loop {name!r} ended unexpectedly"))

    def _died(self, died: BaseException) -> None:
        log.error("a background loop died; stopping: %r", died, exc_info=died)
        self.died.append(died)
        self._stop.set()
