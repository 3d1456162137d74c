"""Supervises the background tasks of a process (app/process.py): the controller's loops, the
metadata-store probe and the segment store's membership, listener and orphan sweep alike.

Tasks run until shutdown. One that dies, or returns before shutdown was asked for, is a bug:
it is logged, and `stop` is set so the process stops (with exit code 1) rather than run half-alive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from workers.failpoints import failpoint

log = logging.getLogger("pgcontroller")


class BackgroundLoops:
    def __init__(self, stop: asyncio.Event, logger: logging.Logger = log) -> None:
        self._stop = stop
        self._log = logger
        self._tasks: list[asyncio.Task[None]] = []
        self._by_name: dict[str, asyncio.Task[None]] = {}
        self.died: list[BaseException] = []
        self._failures: dict[str, BaseException] = {}

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        task = asyncio.create_task(self._must_not_end(name, loop), name=name)
        self._tasks.append(task)
        self._by_name[name] = task
        return task

    @property
    def tasks(self) -> Mapping[str, asyncio.Task[None]]:
        return self._by_name

    def running(self, name: str) -> bool | None:
        """True while the loop runs, False once it has ended, None before it was started."""
        task = self._by_name.get(name)
        return None if task is None else not task.done()

    def failure(self, name: str) -> BaseException | None:
        """Why the named task ended, when it died (None while it runs, or when it was cancelled)."""
        return self._failures.get(name)

    async def cancel(self) -> None:
        """Cancels every loop and waits until each has ended."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _must_not_end(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            # `PGCONTROLLER_FAILPOINTS=task.<name>=raise` kills any task at its start: the tests
            # prove the policy holds for each kind of task and each kind of process.
            await failpoint(f"task.{name}")
            await loop()
        except Exception as died:
            self._died(name, died)
            return
        if not self._stop.is_set():
            self._died(name, RuntimeError(f"background loop {name!r} ended unexpectedly"))

    def _died(self, name: str, died: BaseException) -> None:
        self._failures[name] = died
        self._log.error("a background loop died; stopping: %r", died, exc_info=died)
        self.died.append(died)
        self._stop.set()
