"""Every change of a segment, as this store learns of it: the wake-ups of reads parked at the
segment's tail, ordered by offset, and the feeding and dropping of the read index.

Invariants: a waiter registered before a read is woken by any later change that can answer it,
so a change landing between the read and the wait is never missed, and nothing here polls. An
append made here wakes only the reads parked below the segment's new length (the bytes of every
offset are written by exactly one append, whose wake-up reaches that offset; reads beyond it stay
parked); every other change (merge, seal, truncate, delete), one heard through peers.py from
another store of the same `serve --processes N` run, and close() wake them all.

The read index (read_index.py) is fed only by appends that committed here with no other change of
their segment seen while they were in flight; every other change, an append that failed (its
outcome may be unknown) and a change heard from a sibling drop the segment's entry.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterable

from app.segmentstore.server.read_index import ReadIndex


class TailWatch:
    """One registration: becomes set when a change reaches its offset or the server closes."""

    __slots__ = ("_future", "_offset", "_segment", "_tails")

    def __init__(self, tails: Tails, segment: str, offset: int, future: asyncio.Future[None]) -> None:
        self._tails = tails
        self._segment = segment
        self._offset = offset
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
        self._tails._forget(self._segment, self._offset, self._future)


class _Parked:
    """One segment's waiters by offset: the distinct offsets sorted, and each one's waiters."""

    __slots__ = ("by_offset", "offsets")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.by_offset: dict[int, set[asyncio.Future[None]]] = {}

    def add(self, offset: int, future: asyncio.Future[None]) -> None:
        waiters = self.by_offset.get(offset)
        if waiters is None:
            waiters = self.by_offset[offset] = set()
            bisect.insort(self.offsets, offset)
        waiters.add(future)

    def discard(self, offset: int, future: asyncio.Future[None]) -> None:
        waiters = self.by_offset.get(offset)
        if waiters is None:
            return
        waiters.discard(future)
        if not waiters:
            del self.by_offset[offset]
            del self.offsets[bisect.bisect_left(self.offsets, offset)]

    def below(self, length: int) -> list[set[asyncio.Future[None]]]:
        """Takes out the waiters of the offsets below `length`."""
        count = bisect.bisect_left(self.offsets, length)
        taken = [self.by_offset.pop(offset) for offset in self.offsets[:count]]
        del self.offsets[:count]
        return taken

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self.by_offset.values())


class Tails:
    def __init__(
        self, on_change: Callable[[str], None] | None = None, index: ReadIndex | None = None
    ) -> None:
        """`on_change` hears every change made here (the other stores of a `serve --processes N`
        run wake their own waiters on it, through `heard`). `index`: the read index this store's
        appends feed (none kept without it)."""
        self._parked: dict[str, _Parked] = {}
        self._on_change = on_change
        self.index = index if index is not None else ReadIndex(0, 0)
        # Segments with appends in flight: [how many, how many other changes seen meanwhile].
        self._appending: dict[str, list[int]] = {}
        self.closed = False

    def watch(self, segment: str, offset: int = 0) -> TailWatch:
        """A registration for a read of `segment` at `offset`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_result(None)
        else:
            parked = self._parked.get(segment)
            if parked is None:
                parked = self._parked[segment] = _Parked()
            parked.add(offset, future)
        return TailWatch(self, segment, offset, future)

    def append_started(self, segment: str) -> int:
        """An append of `segment` goes to storage now; the ticket goes to `append_ended`."""
        state = self._appending.get(segment)
        if state is None:
            state = self._appending[segment] = [0, 0]
        state[0] += 1
        return state[1]

    def append_ended(self, segment: str, ticket: int, length: int, data: bytes | None) -> None:
        """The append `ticket` names committed: `data` (None: a duplicate, nothing stored) ends at
        `length`, the segment's committed length. Wakes the reads its bytes reach."""
        changed = self._append_done(segment) != ticket
        if changed:
            # A seal, truncation, merge or a sibling's change may have landed after this append
            # and have been heard before it: its bytes may no longer describe the segment.
            self.index.invalidate(segment)
        elif data is None:
            self.index.appended(segment, length, b"")
        else:
            self.index.appended(segment, length - len(data), data)
        if data is None:
            return
        parked = self._parked.get(segment)
        if parked is not None:
            self._wake(parked.below(length))
            if not parked.by_offset:
                del self._parked[segment]
        if self._on_change is not None:
            self._on_change(segment)

    def append_failed(self, segment: str) -> None:
        """The append raised: refused, or its outcome unknown (it may have committed)."""
        self._append_done(segment)
        self.index.invalidate(segment)

    def notify(self, segment: str) -> None:
        """This store changed `segment` (committed) otherwise than by an append."""
        self.heard(segment)
        if self._on_change is not None:
            self._on_change(segment)

    def heard(self, segment: str) -> None:
        """`segment` changed, here or through another store behind the same port."""
        self._changed(segment)
        parked = self._parked.pop(segment, None)
        if parked is not None:
            self._wake(parked.by_offset.values())

    def drop_cached(self, segment: str) -> None:
        """Drops what the read index holds of `segment` (its container went elsewhere, or a change
        of it failed and may have committed)."""
        self._changed(segment)

    def close(self) -> None:
        """Wakes every waiter, now and from now on: the server is going away."""
        self.closed = True
        for segment in list(self._parked):
            self.heard(segment)
        self.index.clear()

    def waiting(self) -> int:
        return sum(len(parked) for parked in self._parked.values())

    def _changed(self, segment: str) -> None:
        self.index.invalidate(segment)
        state = self._appending.get(segment)
        if state is not None:
            state[1] += 1

    def _append_done(self, segment: str) -> int:
        """Ends one append in flight; the number of other changes seen so far."""
        state = self._appending[segment]
        state[0] -= 1
        if state[0] == 0:
            del self._appending[segment]
        return state[1]

    @staticmethod
    def _wake(groups: Iterable[set[asyncio.Future[None]]]) -> None:
        for waiters in groups:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    def _forget(self, segment: str, offset: int, future: asyncio.Future[None]) -> None:
        parked = self._parked.get(segment)
        if parked is not None:
            parked.discard(offset, future)
            if not parked.by_offset:
                del self._parked[segment]
        if not future.done():
            future.cancel()
