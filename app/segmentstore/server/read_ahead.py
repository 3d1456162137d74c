"""Read-ahead for readers catching up: after a read answered from PostgreSQL whose next range of
the same size is wholly committed, that range is read at once, while the reply travels and the
reader works through it, so the reader's next read finds its bytes fetched. Pravega's clients ask
for the next range only when the previous reply has come (the Rust client's fetch is one read
ahead of its application, no more), so without this every catch-up read waits for a database read
in turn.

Invariant: an entry answers only a read of exactly its segment, offset and size, with what a
database read of that range answered when the entry was started; the range lay wholly below the
segment's committed length then, so the reply's flags are neither at_tail nor end_of_segment
whatever was appended or sealed since, and its bytes never change. Every other change of the
segment as this store learns of it (truncate, delete, merge, a sibling's change; tails.py calls
`invalidate`) drops the segment's entry, so the one caveat is the read index's: a sibling store's
change in the moment before this store hears of it. Bounded by `budget_bytes` (the sizes of the
entries, fetching or fetched): past it the oldest goes. One entry per segment. An entry dropped
while its read is still running lets that read end on its own, uncounted: a read starts at most
one read ahead, so a reader jumping about costs the database twice its reads at most.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from app.segmentstore.storage import ReadResult

# The budget of a store started without its settings (the setting's default is the same): eight
# reads of Pravega's largest reply (2 MiB).
DEFAULT_READ_AHEAD_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Entry:
    offset: int
    size: int
    fetch: asyncio.Task[ReadResult]


class ReadAhead:
    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._held = 0
        # Entries dropped while still fetching (a query is not cancelled half-way: asyncpg would
        # then reset its connection); kept referenced until they end.
        self._abandoned: set[asyncio.Task[ReadResult]] = set()

    @property
    def held_bytes(self) -> int:
        return self._held

    def __len__(self) -> int:
        return len(self._entries)

    def start(self, segment: str, offset: int, size: int, read: Callable[[], Awaitable[ReadResult]]) -> None:
        """Fetches (segment, offset, size) now with `read`, for a read of it to `answer` later."""
        if size <= 0 or size > self._budget:
            return
        self._drop(segment)
        while self._entries and self._held + size > self._budget:
            self._drop(next(iter(self._entries)))
        fetch = asyncio.get_running_loop().create_task(_awaited(read))
        fetch.add_done_callback(_retrieve)
        self._entries[segment] = _Entry(offset, size, fetch)
        self._held += size

    async def answer(self, segment: str, offset: int, size: int) -> ReadResult | None:
        """What the fetch of exactly this range read, when there is one and it succeeded; else
        None, and the caller reads afresh (a refusal then comes from a read made now). An entry of
        the segment at another range is dropped: its reader went elsewhere."""
        entry = self._entries.get(segment)
        if entry is None:
            return None
        if entry.offset != offset or entry.size != size:
            self._drop(segment)
            return None
        del self._entries[segment]
        self._held -= entry.size
        fetch = entry.fetch
        try:
            # Not `await fetch`: a reader going away leaves the query to end on its own.
            await asyncio.wait((fetch,))
        except asyncio.CancelledError:
            self._abandon(fetch)
            raise
        if fetch.cancelled() or fetch.exception() is not None:
            return None
        return fetch.result()

    def invalidate(self, segment: str) -> None:
        self._drop(segment)

    def clear(self) -> None:
        """The store is closing: every fetch is cancelled."""
        for entry in self._entries.values():
            entry.fetch.cancel()
        for fetch in self._abandoned:
            fetch.cancel()
        self._entries.clear()
        self._abandoned.clear()
        self._held = 0

    def _drop(self, segment: str) -> None:
        entry = self._entries.pop(segment, None)
        if entry is None:
            return
        self._held -= entry.size
        self._abandon(entry.fetch)

    def _abandon(self, fetch: asyncio.Task[ReadResult]) -> None:
        if not fetch.done():
            self._abandoned.add(fetch)
            fetch.add_done_callback(self._abandoned.discard)


async def _awaited(read: Callable[[], Awaitable[ReadResult]]) -> ReadResult:
    return await read()


def _retrieve(fetch: asyncio.Task[ReadResult]) -> None:
    # A failed fetch nobody takes is no error of its own: a read made later reports what is wrong.
    if not fetch.cancelled():
        fetch.exception()
