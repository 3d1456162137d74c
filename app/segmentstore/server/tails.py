"""Wake-ups for reads parked at a segment's tail: one set of waiters per segment name.

Invariant: a waiter registered before a read is woken by any later change of that segment
(append, merge, seal, truncate, delete), made here or (heard through peers.py) by another store of
the same `serve --processes N` run, or by close(), so a change landing between the read and the
wait is never missed; nothing here polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class TailWatch:
    """One registration: becomes set when its segment changes or the server closes."""

    __slots__ = ("_future", "_segment", "_tails")

    def __init__(self, tails: Tails, segment: str, future: asyncio.Future[None]) -> None:
        self._tails = tails
        self._segment = segment
        self._future = future

    async def wait(self, timeout_s: float) -> bool:
        """True when woken, False when `timeout_s` passed first."""
        if self._future.done():
            return True
        if timeout_s <= 0:
            return False
        done, _ = await asyncio.wait({self._future}, timeout=timeout_s)
        return bool(done)

    def cancel(self) -> None:
        self._tails._forget(self._segment, self._future)


class Tails:
    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        """`on_change` hears every change made here (the other stores of a `serve --processes N`
        run wake their own waiters on it, through `heard`)."""
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._on_change = on_change
        self.closed = False

    def watch(self, segment: str) -> TailWatch:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_result(None)
        else:
            self._waiters.setdefault(segment, set()).add(future)
        return TailWatch(self, segment, future)

    def notify(self, segment: str) -> None:
        """This store changed `segment` (committed)."""
        self.heard(segment)
        if self._on_change is not None:
            self._on_change(segment)

    def heard(self, segment: str) -> None:
        """`segment` changed, here or through another store behind the same port."""
        for future in self._waiters.pop(segment, ()):
            if not future.done():
                future.set_result(None)

    def close(self) -> None:
        """Wakes every waiter, now and from now on: the server is going away."""
        self.closed = True
        for segment in list(self._waiters):
            self.heard(segment)

    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._waiters.values())

    def _forget(self, segment: str, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(segment)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[segment]
        if not future.done():
            future.cancel()
