"""Spark calls a data source synchronously; the stream client is asyncio. A `LoopThread` runs one
private event loop on a thread of its own for the life of a reader or writer, so its background
work (a transaction's pings) goes on while Spark's thread waits for rows or computes them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        """`iterator`'s items, one loop round trip each; closed however the caller stops."""
        try:
            while True:
                try:
                    yield self.run(_next(iterator))
                except StopAsyncIteration:
                    return
        finally:
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                self.run(closer())

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def _next(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()


def run_once(coroutine: Coroutine[Any, Any, T]) -> T:
    """One call on a loop of its own (the driver's planning calls)."""
    loop = LoopThread()
    try:
        return loop.run(coroutine)
    finally:
        loop.close()
