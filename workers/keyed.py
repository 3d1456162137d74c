"""One serial queue per key under a global concurrency ceiling (kopf's pattern).

Items of one key run strictly one after another in submission order; different keys run at
once, at most `ceiling` at a time. A processor may ask for its item to be retried later: the
key's worker then sleeps *without* holding a slot and retries the same item before any later
one, so a postponed request never lets its successors overtake it. A key's worker exits when
its queue stays empty for `idle_s`. Shutdown: stop intake, drain with a timeout, cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.waiting import bounded

log = logging.getLogger("pgcontroller.workers")

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class RetryLater(Generic[T]):
    """Run `item` (possibly updated, e.g. with a new row version) again after `delay_s`."""

    item: T
    delay_s: float


Processor = Callable[[T], Awaitable["RetryLater[T] | None"]]


class KeyedQueues(Generic[K, T]):
    def __init__(
        self,
        process: Processor[T],
        *,
        ceiling: int,
        idle_s: float = 5.0,
        on_done: Callable[[T], None] | None = None,
    ) -> None:
        self._process = process
        self._slots = asyncio.Semaphore(ceiling)
        self._idle_s = idle_s
        self._on_done = on_done
        self._queues: dict[K, asyncio.Queue[T]] = {}
        self._workers: dict[K, asyncio.Task[None]] = {}
        self._busy: set[K] = set()
        self._closed = False

    @property
    def active_keys(self) -> int:
        return len(self._workers)

    def submit(self, key: K, item: T) -> None:
        if self._closed:
            raise RuntimeError("queues are shut down")
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue()
        queue.put_nowait(item)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"key:{key}")

    async def _work(self, key: K, queue: asyncio.Queue[T]) -> None:
        try:
            while True:
                try:
                    item = await bounded(queue.get(), limit_s=self._idle_s)
                except TimeoutError:
                    if queue.empty():
                        return
                    continue
                self._busy.add(key)
                try:
                    await self._run_to_completion(item)
                except Exception:
                    # A processor is meant to handle its own failures; if one escapes, the item
                    # is dropped from memory only: the dispatcher finds it in the database again.
                    log.exception("processing an item of %s failed", key)
                finally:
                    self._busy.discard(key)
                if self._on_done is not None:
                    self._on_done(item)
                if self._closed and queue.empty():
                    return
        finally:
            # Only forget the queue if no item arrived after we decided to exit.
            if self._workers.get(key) is asyncio.current_task():
                del self._workers[key]
                if queue.empty():
                    self._queues.pop(key, None)
                elif not self._closed:
                    self._workers[key] = asyncio.create_task(self._work(key, queue), name=f"key:{key}")

    async def _run_to_completion(self, item: T) -> None:
        while True:
            async with self._slots:
                retry = await self._process(item)
            if retry is None:
                return
            item = retry.item
            await asyncio.sleep(retry.delay_s)

    def cancel_where(self, predicate: Callable[[K], bool]) -> int:
        """Stops the workers of keys we no longer own; their items stay in the database."""
        cancelled = 0
        for key, task in list(self._workers.items()):
            if predicate(key):
                del self._workers[key]
                self._queues.pop(key, None)
                task.cancel()
                cancelled += 1
        return cancelled

    async def shutdown(self, timeout_s: float) -> None:
        self._closed = True
        tasks = list(self._workers.values())
        if not tasks:
            return
        # Idle workers would wait out their idle timeout; stop them now. Busy ones finish
        # their current item (and any already queued) within the timeout.
        for key, task in self._workers.items():
            if key not in self._busy and self._queues[key].empty():
                task.cancel()
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
