"""The Coalescer: calls of one loop turn run as one batch, each caller gets its own item's
outcome, a failing batch falls back to one call per item, and a cancelled caller or a cancelled
batch leaves nobody waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from app.store.batching import MAX_BATCH, Coalescer


class Refused(Exception):
    pass


class Recorder:
    """`one` doubles an item, `many` doubles each; an odd item is refused; calls are recorded."""

    def __init__(self, many_fails: bool = False) -> None:
        self.ones: list[int] = []
        self.manys: list[list[int]] = []
        self.many_fails = many_fails

    async def one(self, item: int) -> int:
        self.ones.append(item)
        await asyncio.sleep(0)
        if item % 2:
            raise Refused(item)
        return 2 * item

    async def many(self, items: Sequence[int]) -> list[int | Exception]:
        self.manys.append(list(items))
        await asyncio.sleep(0)
        if self.many_fails:
            raise RuntimeError("the batch statement failed")
        return [Refused(i) if i % 2 else 2 * i for i in items]


async def test_calls_of_one_turn_are_one_batch_with_each_callers_outcome() -> None:
    r = Recorder()
    c = Coalescer(r.one, r.many)
    outcomes = await asyncio.gather(c(2), c(3), c(4), return_exceptions=True)
    assert outcomes[0] == 4 and outcomes[2] == 8
    assert isinstance(outcomes[1], Refused) and outcomes[1].args == (3,)
    assert r.manys == [[2, 3, 4]] and r.ones == []


async def test_a_lone_call_runs_alone() -> None:
    r = Recorder()
    c = Coalescer(r.one, r.many)
    assert await c(6) == 12
    with pytest.raises(Refused):
        await c(5)
    assert r.ones == [6, 5] and r.manys == []


async def test_calls_of_later_turns_are_later_batches() -> None:
    r = Recorder()
    c = Coalescer(r.one, r.many)
    first = asyncio.gather(c(2), c(4))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    second = asyncio.gather(c(6), c(8))
    assert await first == [4, 8] and await second == [12, 16]
    assert r.manys == [[2, 4], [6, 8]]


async def test_a_failed_batch_runs_each_item_alone() -> None:
    r = Recorder(many_fails=True)
    c = Coalescer(r.one, r.many)
    outcomes = await asyncio.gather(c(2), c(3), return_exceptions=True)
    assert outcomes[0] == 4 and isinstance(outcomes[1], Refused)
    assert r.manys == [[2, 3]] and sorted(r.ones) == [2, 3]


async def test_batches_are_bounded() -> None:
    r = Recorder()
    c = Coalescer(r.one, r.many)
    items = [2 * i for i in range(MAX_BATCH + 3)]
    assert await asyncio.gather(*(c(i) for i in items)) == [2 * i for i in items]
    assert [len(b) for b in r.manys] == [MAX_BATCH, 3]


async def test_a_cancelled_caller_leaves_the_others_their_outcome() -> None:
    r = Recorder()
    c = Coalescer(r.one, r.many)
    gone = asyncio.ensure_future(c(2))
    kept = asyncio.ensure_future(c(4))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == 8
    assert gone.cancelled()


async def test_a_cancelled_batch_cancels_its_callers() -> None:
    started = asyncio.Event()

    async def many(items: Sequence[int]) -> list[int | Exception]:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("never")

    async def one(item: int) -> int:
        return item

    c: Coalescer[int, int] = Coalescer(one, many)
    callers = [asyncio.ensure_future(c(i)) for i in (1, 2)]
    await started.wait()
    for task in list(c._running):
        task.cancel()
    for caller in callers:
        with pytest.raises(asyncio.CancelledError):
            await caller
