"""GroupCommit.settled (app/store/group_commit.py): returns once every item asked for before it
has been committed or dropped, and not before; what is asked for after it is not waited for."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.store.group_commit import GroupCommit


class Gate:
    """A commit function that waits until a test opens it, recording what it committed."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.committed: list[int] = []

    async def one(self, item: int) -> int:
        await self.opened.wait()
        self.committed.append(item)
        return item

    async def many(self, items: Sequence[int]) -> list[int | Exception]:
        await self.opened.wait()
        self.committed.extend(items)
        return list(items)


def _group(gate: Gate) -> GroupCommit[int, int]:
    return GroupCommit(gate.one, gate.many, lambda item: 1, max_items=2, max_bytes=100)


async def test_settled_returns_at_once_when_nothing_was_asked() -> None:
    await asyncio.wait_for(_group(Gate()).settled(), 1)


async def test_settled_waits_for_the_group_in_flight_and_those_queued_behind_it() -> None:
    gate = Gate()
    group = _group(gate)
    asked = [asyncio.create_task(group(n)) for n in range(5)]
    await asyncio.sleep(0.01)
    settled = asyncio.create_task(group.settled())
    later = asyncio.create_task(group(99))
    await asyncio.sleep(0.05)
    assert not settled.done()
    gate.opened.set()
    await asyncio.wait_for(settled, 1)
    assert set(range(5)) <= set(gate.committed)
    assert await asyncio.gather(*asked) == list(range(5))
    assert await later == 99


async def test_settled_counts_an_item_whose_caller_gave_up_as_settled() -> None:
    gate = Gate()
    group = _group(gate)
    first = asyncio.create_task(group(1))
    await asyncio.sleep(0.01)
    gave_up = asyncio.create_task(group(2))
    await asyncio.sleep(0.01)
    gave_up.cancel()
    settled = asyncio.create_task(group.settled())
    gate.opened.set()
    await asyncio.wait_for(settled, 1)
    assert await first == 1 and gate.committed == [1]
