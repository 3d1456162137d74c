"""The appends a store has received and not yet handed to storage, by writer (waiting for the
tier's admission, or for room in their connection's pipeline, or for their task's first step).

A writer that sets up again on another connection (its client gave up on the old one, which
still holds its last blocks) is answered only once none of its appends is still on its way to
storage here: storage then answers after them too (`GroupCommit.settled`), so the number the
writer is told covers every block it ever sent this store, and its resend stores nothing twice.

Invariant: a count goes up when the connection accepts an append frame and down exactly once,
either in the same event-loop step that hands the append to storage's group commit, or when the
append is dropped before that (refused, or its connection broke first).
"""

from __future__ import annotations

import asyncio

Key = tuple[str, int]


class Arrival:
    """One append on its way: `handed_over` once it reached storage or was dropped."""

    __slots__ = ("_done", "_key", "_registry")

    def __init__(self, registry: ArrivingAppends, key: Key) -> None:
        self._registry = registry
        self._key = key
        self._done = False

    def handed_over(self, *_ignored: object) -> None:
        """Idempotent (a task's done-callback may call it after the task already did)."""
        if not self._done:
            self._done = True
            self._registry._left(self._key)


class ArrivingAppends:
    def __init__(self) -> None:
        self._counts: dict[Key, int] = {}
        self._waiting: dict[Key, list[asyncio.Future[None]]] = {}

    def arriving(self, segment: str, writer_id: int) -> Arrival:
        key = (segment, writer_id)
        self._counts[key] = self._counts.get(key, 0) + 1
        return Arrival(self, key)

    def on_the_way(self, segment: str, writer_id: int) -> int:
        return self._counts.get((segment, writer_id), 0)

    async def handed_over(self, segment: str, writer_id: int) -> None:
        """Returns once no append of the writer to the segment is on its way to storage here."""
        key = (segment, writer_id)
        if key not in self._counts:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        await future

    def _left(self, key: Key) -> None:
        count = self._counts[key] - 1
        if count:
            self._counts[key] = count
            return
        del self._counts[key]
        for future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(None)
