"""The long-term tier's throttle: appends to a container over its bound wait for the storage
writer to bring it under, at most the delay; other containers' appends never wait."""

from __future__ import annotations

import asyncio

from app.store.tier_throttle import TierThrottle

BOUND = 1000


def container_of(segment: str) -> int:
    return int(segment.rsplit("/", 1)[1])


async def test_appends_go_at_once_while_no_container_is_over_its_bound() -> None:
    throttle = TierThrottle(BOUND, 5.0, container_of)
    assert throttle.admission("s/0") is None
    throttle.update({0: BOUND, 1: 10})  # at the bound is not over it
    assert throttle.admission("s/0") is None
    assert throttle.delayed == 0


async def test_an_append_over_the_bound_waits_until_the_writer_catches_up() -> None:
    throttle = TierThrottle(BOUND, 5.0, container_of)
    throttle.update({0: BOUND + 1, 1: 5})
    assert throttle.admission("s/1") is None  # another container goes on
    waiting = throttle.admission("s/0")
    assert waiting is not None
    task = asyncio.ensure_future(waiting)
    await asyncio.sleep(0.05)
    assert not task.done()
    throttle.update({0: BOUND + 1})  # still over: still waiting
    await asyncio.sleep(0.05)
    assert not task.done()
    throttle.update({0: 10})
    await asyncio.wait_for(task, 1.0)
    assert throttle.delayed == 1
    assert throttle.admission("s/0") is None


async def test_an_append_waits_at_most_the_delay() -> None:
    throttle = TierThrottle(BOUND, 0.2, container_of)
    throttle.update({3: 10 * BOUND})
    waiting = throttle.admission("s/3")
    assert waiting is not None
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(waiting, 2.0)
    assert 0.19 <= asyncio.get_running_loop().time() - started < 1.0
    assert throttle.over == frozenset({3})
