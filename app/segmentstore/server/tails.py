"""Every change of a segment, as this store learns of it: the wake-ups of reads parked at the
segment's tail, ordered by offset, and the feeding and dropping of the read index.

Invariants: a waiter registered before a read is woken by any later change that can answer it,
so a change landing between the read and the wait is never missed, and nothing here polls. An
append made here wakes only the reads parked below the segment's new length (the bytes of every
offset are written by exactly one append, whose wake-up reaches that offset; reads beyond it stay
parked); every other change (merge, seal, truncate, delete), one heard through peers.py from
another store of the same `serve --processes N` run, and close() wake them all.

A read that is about to answer with a segment's tail may linger (`linger_s`): a writer of
Pravega's clients keeps one append block in flight per segment and sends the next when the ack
comes, so what it wrote together reaches the store one commit apart. A read answering right after
an append of its segment ended (woken by it, or arriving just after it) waits for the segment's
next append to arrive (until `linger_s` after that end) and then for it to end (at most
`ENDING_WAIT_FACTOR` times `linger_s`), and so answers both at once, as Pravega's store, whose acks
take no disk write, answers a reader that asks after both. A lone event's read pays `linger_s` of
latency at most; a read woken by any other change, or of a segment not written just now, does not
wait.

The read index (read_index.py) is fed only by appends that committed here with no other change of
their segment seen while they were in flight; every other change, an append that failed (its
outcome may be unknown) and a change heard from a sibling drop the segment's entry.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable, Iterable
from typing import Final

from app.segmentstore.server.read_ahead import ReadAhead
from app.segmentstore.server.read_index import ReadIndex

# How long a lingering read waits for the append that arrived to end, in `linger_s`: one group
# commit of a loaded store (the second append's own commit is what the read waits for).
ENDING_WAIT_FACTOR: Final = 10


class TailWatch:
    """One registration: becomes set when a change reaches its offset or the server closes."""

    __slots__ = ("_future", "_offset", "_segment", "_tails")

    def __init__(self, tails: Tails, segment: str, offset: int, future: asyncio.Future[bool]) -> None:
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

    @property
    def by_append(self) -> bool:
        """Woken by an append made here (not by another change, a sibling or the close)."""
        return self._future.done() and not self._future.cancelled() and self._future.result()

    def cancel(self) -> None:
        self._tails._forget(self._segment, self._offset, self._future)


class _Parked:
    """One segment's waiters by offset: the distinct offsets sorted, and each one's waiters."""

    __slots__ = ("by_offset", "offsets")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.by_offset: dict[int, set[asyncio.Future[bool]]] = {}

    def add(self, offset: int, future: asyncio.Future[bool]) -> None:
        waiters = self.by_offset.get(offset)
        if waiters is None:
            waiters = self.by_offset[offset] = set()
            bisect.insort(self.offsets, offset)
        waiters.add(future)

    def discard(self, offset: int, future: asyncio.Future[bool]) -> None:
        waiters = self.by_offset.get(offset)
        if waiters is None:
            return
        waiters.discard(future)
        if not waiters:
            del self.by_offset[offset]
            del self.offsets[bisect.bisect_left(self.offsets, offset)]

    def below(self, length: int) -> list[set[asyncio.Future[bool]]]:
        """Takes out the waiters of the offsets below `length`."""
        count = bisect.bisect_left(self.offsets, length)
        taken = [self.by_offset.pop(offset) for offset in self.offsets[:count]]
        del self.offsets[:count]
        return taken

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self.by_offset.values())


class Tails:
    def __init__(
        self,
        on_change: Callable[[str], None] | None = None,
        index: ReadIndex | None = None,
        linger_s: float = 0.0,
        ahead: ReadAhead | None = None,
    ) -> None:
        """`on_change` hears every change made here (the other stores of a `serve --processes N`
        run wake their own waiters on it, through `heard`). `index`: the read index this store's
        appends feed (none kept without it). `linger_s`: how long a read woken by an append waits
        for the segment's next append to arrive (0: it does not). `ahead`: the read-ahead of
        catch-up reads (read_ahead.py; none without it), dropped with the read index's entries."""
        self._parked: dict[str, _Parked] = {}
        self._on_change = on_change
        self.index = index if index is not None else ReadIndex(0, 0)
        self.ahead = ahead if ahead is not None else ReadAhead(0)
        # Segments with appends in flight: [how many, how many other changes seen meanwhile].
        self._appending: dict[str, list[int]] = {}
        self._linger_s = linger_s
        # Lingering reads' waits: for the segment's next append to start, and to end.
        self._next_start: dict[str, asyncio.Future[None]] = {}
        self._next_end: dict[str, asyncio.Future[None]] = {}
        # When each segment's last append here ended, oldest first, for the last `linger_s` only.
        self._recent: dict[str, float] = {}
        self.closed = False

    def watch(self, segment: str, offset: int = 0) -> TailWatch:
        """A registration for a read of `segment` at `offset`."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_result(False)
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
        _resolve(self._next_start, segment)
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
        if self._linger_s > 0:
            self._remember_end(segment)
        parked = self._parked.get(segment)
        if parked is not None:
            self._wake(parked.below(length), by_append=True)
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
        # A lingering read of a sealed, merged or deleted segment waits for no more appends.
        _resolve(self._next_start, segment)
        _resolve(self._next_end, segment)
        self._recent.pop(segment, None)
        parked = self._parked.pop(segment, None)
        if parked is not None:
            self._wake(parked.by_offset.values(), by_append=False)

    def drop_cached(self, segment: str) -> None:
        """Drops what the read index holds of `segment` (its container went elsewhere, or a change
        of it failed and may have committed)."""
        self._changed(segment)

    def close(self) -> None:
        """Wakes every waiter, now and from now on: the server is going away."""
        self.closed = True
        for segment in list(self._parked):
            self.heard(segment)
        for waits in (self._next_start, self._next_end):
            for segment in list(waits):
                _resolve(waits, segment)
        self.index.clear()
        self.ahead.clear()

    def may_linger(self, segment: str) -> bool:
        """Whether a read answering with the tail of `segment` now would linger (`linger`)."""
        if self._linger_s <= 0 or self.closed:
            return False
        if segment in self._appending:
            return True
        ended_at = self._recent.get(segment)
        return ended_at is not None and ended_at + self._linger_s > asyncio.get_running_loop().time()

    def woken(self, segment: str, offset: int) -> TailWatch:
        """A registration already woken, as by an append: its read lingers, then answers."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        future.set_result(True)
        return TailWatch(self, segment, offset, future)

    async def linger(self, segment: str) -> bool:
        """For a read about to answer with the tail of `segment`: waits for the append of it in
        flight, if any, to end; then, if one ended less than `linger_s` ago (its writer may send
        what follows as soon as its ack arrives), for the next to arrive within `linger_s` of that
        end and to end. True when an append ended meanwhile (the read has more to answer)."""
        if self._linger_s <= 0 or self.closed:
            return False
        ending_s = self._linger_s * ENDING_WAIT_FACTOR
        ended = False
        if segment in self._appending:
            ended = await _next(self._next_end, segment, ending_s)
            if not ended:
                return False
        ended_at = self._recent.get(segment)
        if ended_at is None:
            return ended
        if segment not in self._appending:
            remaining = ended_at + self._linger_s - asyncio.get_running_loop().time()
            if remaining <= 0 or not await _next(self._next_start, segment, remaining):
                return ended
        return await _next(self._next_end, segment, ending_s) or ended

    def waiting(self) -> int:
        return sum(len(parked) for parked in self._parked.values())

    def _changed(self, segment: str) -> None:
        self.index.invalidate(segment)
        self.ahead.invalidate(segment)
        state = self._appending.get(segment)
        if state is not None:
            state[1] += 1

    def _remember_end(self, segment: str) -> None:
        now = asyncio.get_running_loop().time()
        self._recent.pop(segment, None)
        self._recent[segment] = now
        # Entries older than the linger are of no use: the oldest go first.
        for oldest, ended_at in list(itertools.islice(self._recent.items(), 2)):
            if ended_at + self._linger_s < now:
                del self._recent[oldest]

    def _append_done(self, segment: str) -> int:
        """Ends one append in flight; the number of other changes seen so far."""
        state = self._appending[segment]
        state[0] -= 1
        if state[0] == 0:
            del self._appending[segment]
        _resolve(self._next_end, segment)
        return state[1]

    @staticmethod
    def _wake(groups: Iterable[set[asyncio.Future[bool]]], *, by_append: bool) -> None:
        for waiters in groups:
            for future in waiters:
                if not future.done():
                    future.set_result(by_append)

    def _forget(self, segment: str, offset: int, future: asyncio.Future[bool]) -> None:
        parked = self._parked.get(segment)
        if parked is not None:
            parked.discard(offset, future)
            if not parked.by_offset:
                del self._parked[segment]
        if not future.done():
            future.cancel()


def _resolve(waits: dict[str, asyncio.Future[None]], segment: str) -> None:
    future = waits.pop(segment, None)
    if future is not None and not future.done():
        future.set_result(None)


async def _next(waits: dict[str, asyncio.Future[None]], segment: str, timeout_s: float) -> bool:
    """Waits for the next resolution of `segment`'s entry in `waits`; False when `timeout_s`
    passed first (the entry stays for the next waiter, resolved by the next event)."""
    future = waits.get(segment)
    if future is None:
        future = waits[segment] = asyncio.get_running_loop().create_future()
    done, _ = await asyncio.wait({future}, timeout=timeout_s)
    if not done and waits.get(segment) is future:
        # Nothing came (the writer is idle, or the segment is gone): the entry is not kept; a
        # waiter sharing it still wakes at its own timeout.
        del waits[segment]
    return bool(done)
