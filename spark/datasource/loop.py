"""Spark calls a data source synchronously; the stream client is asyncio. A `LoopThread` runs one
private event loop on a thread of its own for the life of a reader or writer, so its background
work (a transaction's pings) goes on while Spark's thread waits for rows or computes them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pravega-source", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Runs `coroutine` in the background until it ends or the future is cancelled."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def iterate(self, iterator: AsyncIterator[T], ahead: int = 2) -> Iterator[T]:
        """`iterator`'s items, fetched on the loop up to `ahead` items before the caller takes
        them (the next reads overlap the caller's work on this one); closed however the caller
        stops."""
        items: queue.Queue[tuple[bool | None, Any]] = queue.Queue(maxsize=ahead)
        room = self.run(_event())
        pump = asyncio.run_coroutine_threadsafe(_pump(iterator, items, room), self._loop)
        try:
            while True:
                done, value = items.get()
                self._loop.call_soon_threadsafe(room.set)
                if done is None:
                    return
                if done is False:
                    raise value
                yield value
        finally:
            pump.cancel()
            concurrent.futures.wait([pump])

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def _pump(
    iterator: AsyncIterator[T], items: queue.Queue[tuple[bool | None, Any]], room: asyncio.Event
) -> None:
    """Moves `iterator`'s items into `items` (True, item), then (None, None) at its end or
    (False, exception) at its failure; waits while `items` is full. The consumer sets `room`
    after each take, on this loop, so a check of `items.full()` and the wait cannot miss it."""

    async def put(entry: tuple[bool | None, Any]) -> None:
        while items.full():
            room.clear()
            if items.full():
                await room.wait()
        items.put_nowait(entry)

    try:
        try:
            async for item in iterator:
                await put((True, item))
        except Exception as exc:
            await put((False, exc))
            return
        await put((None, None))
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()


def run_once(coroutine: Coroutine[Any, Any, T]) -> T:
    """One call on a loop of its own (the driver's planning calls)."""
    loop = LoopThread()
    try:
        return loop.run(coroutine)
    finally:
        loop.close()
