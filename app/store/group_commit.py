"""Group commit: writes asked for while the previous group is being committed are committed
together, in one transaction and one WAL flush, and each caller answered after it (as Pravega's
durable log batches the operations that arrive during a write to its log).

Invariant: items are committed in the order they were asked for, one group at a time (so the
appends of one writer, asked in order, reach the database in order); each caller gets the outcome
its item would have had alone after the items before it: `many` answers each item separately (a
refusal is that item's result, not the group's), and when `many` raises, nothing of the group was
committed and each of its items runs alone, in order; no caller is answered before its group has
committed. `settled(key)` returns once every item of that key asked for before it has been
committed or dropped (its caller gave up before its group began), so a read of what the key names
after it sees them all; items of other keys, in flight or queued, are not waited for.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

from app.store.batching import settle

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """`await group(item)`: the item joins the next group; `many` commits a group (one result per
    item, in order; a result may be an exception for that item alone), `one` an item alone."""

    def __init__(
        self,
        one: Callable[[T], Awaitable[R]],
        many: Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]],
        size: Callable[[T], int],
        key: Callable[[T], Hashable],
        max_items: int,
        max_bytes: int,
    ) -> None:
        self._one = one
        self._many = many
        self._size = size
        self._key = key
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._pending: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._committer: asyncio.Task[None] | None = None
        # Items asked for, and items whose group ended (committed, failed or dropped): groups end
        # in order, so every item numbered up to `_ended` is settled.
        self._asked = 0
        self._ended = 0
        # The number of the last item asked for each key whose group has not ended yet.
        self._last_of_key: dict[Hashable, int] = {}
        self._settling: list[tuple[int, asyncio.Future[None]]] = []
        # Groups committed and items in them, for the metrics and the tests.
        self.groups = 0
        self.items = 0

    async def __call__(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._asked += 1
        self._last_of_key[self._key(item)] = self._asked
        if self._committer is None:
            # Starts at the next loop turn: what else arrives in this one joins the first group.
            self._committer = asyncio.get_running_loop().create_task(self._commit_all())
        return await future

    async def settled(self, key: Hashable) -> None:
        """Returns once every item of `key` asked for so far has been committed or dropped.
        Per key because a group in flight is almost always there under load: a writer set up on
        one segment would otherwise wait for every other segment's appends."""
        last = self._last_of_key.get(key, 0)
        if last <= self._ended:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settling.append((last, future))
        await future

    async def _commit_all(self) -> None:
        try:
            while self._pending:
                group = self._next_group()
                try:
                    await self._commit(group)
                finally:
                    self._group_ended(self._asked - len(self._pending))
        finally:
            self._committer = None
            # Cancelled (the store closing): no caller is left waiting for ever.
            while self._pending:
                self._pending.popleft()[1].cancel()
            self._group_ended(self._asked)

    def _group_ended(self, ended: int) -> None:
        self._ended = ended
        # Only the keys of items still queued stay: the map never outgrows what is in flight.
        self._last_of_key = {key: last for key, last in self._last_of_key.items() if last > ended}
        self._wake_settled()

    def _wake_settled(self) -> None:
        waiting = []
        for target, future in self._settling:
            if target <= self._ended:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((target, future))
        self._settling = waiting

    def _next_group(self) -> list[tuple[T, asyncio.Future[R]]]:
        group: list[tuple[T, asyncio.Future[R]]] = []
        size = 0
        while self._pending and len(group) < self._max_items:
            item, future = self._pending[0]
            item_size = self._size(item)
            if group and size + item_size > self._max_bytes:
                break
            self._pending.popleft()
            if not future.done():  # its caller gave up before the group began: not written
                group.append((item, future))
                size += item_size
        return group

    async def _commit(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        if not group:
            return
        try:
            if len(group) > 1:
                try:
                    results = await self._many([item for item, _ in group])
                except Exception:  # nothing committed: each item runs alone, in order, below
                    pass
                else:
                    self.groups += 1
                    self.items += len(group)
                    for (_, future), result in zip(group, results, strict=True):
                        settle(future, result)
                    return
            for item, future in group:
                try:
                    alone: R | Exception = await self._one(item)
                except Exception as exc:  # handed to the caller that asked
                    alone = exc
                self.groups += 1
                self.items += 1
                settle(future, alone)
        finally:
            for _, future in group:
                future.cancel()
