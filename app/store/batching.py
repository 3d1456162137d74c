"""Calls of one kind made during the same turn of the event loop, run as one database statement
(a transaction's segments are created, and its writers set up, by several connections at once).

Invariant: each caller gets the outcome of its own item as if it had run alone: the batch runs
only after every caller in it asked (so it never answers from older state than a lone call
would), and when the batch statement fails, each item runs alone, so one item's refusal never
becomes another's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from app.turns import EndOfTurn

T = TypeVar("T")
R = TypeVar("R")

# The most items one statement carries (their arrays stay small).
MAX_BATCH = 256


class Coalescer(Generic[T, R]):
    """`await coalescer(item)`: items asked for in one loop turn go to `many` together (one
    result per item, in order; a result may be an exception for that item alone); a lone item,
    or every item of a batch whose `many` raised, goes to `one`."""

    def __init__(
        self,
        one: Callable[[T], Awaitable[R]],
        many: Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]],
    ) -> None:
        self._one = one
        self._many = many
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        # At the end of the turn: the other connections' requests read in the same turn have
        # asked by then.
        self._turn = EndOfTurn(self._flush)
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._turn.ask()
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MAX_BATCH):
            task = asyncio.get_running_loop().create_task(self._run(pending[start : start + MAX_BATCH]))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            await self._settle_all([(item, future) for item, future in batch if not future.done()])
        finally:
            # Cancelled (the store closing): no caller is left waiting for ever.
            for _, future in batch:
                future.cancel()

    async def _settle_all(self, live: list[tuple[T, asyncio.Future[R]]]) -> None:
        if len(live) > 1:
            try:
                results = await self._many([item for item, _ in live])
            except Exception:  # each item runs alone below, with its own outcome
                results = None
            if results is not None:
                for (_, future), result in zip(live, results, strict=True):
                    settle(future, result)
                return
        if len(live) == 1:
            await self._alone(*live[0])
        else:
            await asyncio.gather(*(self._alone(item, future) for item, future in live))

    async def _alone(self, item: T, future: asyncio.Future[R]) -> None:
        try:
            result: R | Exception = await self._one(item)
        except Exception as exc:  # handed to the caller that asked
            result = exc
        settle(future, result)


def settle(future: asyncio.Future[R], result: R | Exception) -> None:
    """Hands `result` (a value, or an exception for this caller alone) to a caller still waiting."""
    if future.done():  # the caller was cancelled meanwhile
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)
