"""GroupCommit.settled (app/store/group_commit.py): returns once every item of its key asked for
before it has been committed or dropped, and not before; what is asked for after it, and items of
other keys, are not waited for."""

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
    # An item's key is its tens: 0-9 one key, 10-19 another.
    return GroupCommit(
        gate.one, gate.many, lambda item: 1, lambda item: item // 10, max_items=2, max_bytes=100
    )


async def test_settled_returns_at_once_when_nothing_was_asked() -> None:
    await asyncio.wait_for(_group(Gate()).settled(0), 1)


async def test_settled_waits_for_the_group_in_flight_and_those_queued_behind_it() -> None:
    gate = Gate()
    group = _group(gate)
    asked = [asyncio.create_task(group(n)) for n in range(5)]
    await asyncio.sleep(0.01)
    settled = asyncio.create_task(group.settled(0))
    later = asyncio.create_task(group(9))
    await asyncio.sleep(0.05)
    assert not settled.done()
    gate.opened.set()
    await asyncio.wait_for(settled, 1)
    assert set(range(5)) <= set(gate.committed)
    assert await asyncio.gather(*asked) == list(range(5))
    assert await later == 9


async def test_settled_counts_an_item_whose_caller_gave_up_as_settled() -> None:
    gate = Gate()
    group = _group(gate)
    first = asyncio.create_task(group(1))
    await asyncio.sleep(0.01)
    gave_up = asyncio.create_task(group(2))
    await asyncio.sleep(0.01)
    gave_up.cancel()
    settled = asyncio.create_task(group.settled(0))
    gate.opened.set()
    await asyncio.wait_for(settled, 1)
    assert await first == 1 and gate.committed == [1]


async def test_settled_does_not_wait_for_the_items_of_other_keys() -> None:
    gate = Gate()
    group = _group(gate)
    # 1 and 12 form the group in flight (held by the gate); 13 and 2 are queued behind it.
    asked = [asyncio.create_task(group(n)) for n in (1, 12, 13, 2)]
    await asyncio.sleep(0.01)
    await asyncio.wait_for(group.settled(3), 1)
    assert gate.committed == []
    of_tens = asyncio.create_task(group.settled(1))
    of_units = asyncio.create_task(group.settled(0))
    await asyncio.sleep(0.05)
    assert not of_tens.done() and not of_units.done()
    gate.opened.set()
    await asyncio.wait_for(asyncio.gather(of_tens, of_units), 1)
    assert await asyncio.gather(*asked) == [1, 12, 13, 2]


async def test_settled_waits_for_the_last_queued_item_of_its_key_not_only_the_group_in_flight() -> None:
    class Stepped(Gate):
        """Each group waits for its own step."""

        def __init__(self) -> None:
            super().__init__()
            self.steps: asyncio.Queue[None] = asyncio.Queue()

        async def many(self, items: Sequence[int]) -> list[int | Exception]:
            await self.steps.get()
            self.committed.extend(items)
            return list(items)

    gate = Stepped()
    group = _group(gate)
    # Groups of two: (1, 12) in flight, then (13, 14), then (5, 6).
    asked = [asyncio.create_task(group(n)) for n in (1, 12, 13, 14, 5, 6)]
    await asyncio.sleep(0.01)
    of_tens = asyncio.create_task(group.settled(1))
    gate.steps.put_nowait(None)
    await asyncio.sleep(0.05)
    assert gate.committed == [1, 12] and not of_tens.done()
    gate.steps.put_nowait(None)
    await asyncio.wait_for(of_tens, 1)
    assert gate.committed == [1, 12, 13, 14]
    gate.steps.put_nowait(None)
    assert await asyncio.gather(*asked) == [1, 12, 13, 14, 5, 6]
