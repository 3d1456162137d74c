"""wait_event: a background loop's bounded wait on its wake-up event, which must end the loop
when it is cancelled even if the event is set in the same loop turn (Python 3.11's
asyncio.wait_for loses that cancellation, and a stopped process then hangs: seen in CI)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from app.waiting import bounded, wait_event


async def test_set_is_true_and_the_timeout_false() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True
    assert await wait_event(event, 0) is True  # set already: no wait at all


async def test_bounded_answers_in_time_or_raises_timeout_error() -> None:
    assert await bounded(asyncio.sleep(0, result=7), limit_s=1) == 7
    with pytest.raises(TimeoutError):
        await bounded(asyncio.sleep(10), limit_s=0.01)


async def test_bounded_keeps_a_cancellation_that_arrives_as_the_awaitable_completes() -> None:
    assert await _ends_when_cancelled_as_it_wakes(lambda event: bounded(event.wait(), limit_s=60))


def _loop(wait: Callable[[asyncio.Event], Awaitable[object]], event: asyncio.Event) -> asyncio.Task[None]:
    async def wakes_and_waits_again() -> None:
        while True:
            await wait(event)
            event.clear()

    return asyncio.create_task(wakes_and_waits_again())


async def _ends_when_cancelled_as_it_wakes(wait: Callable[[asyncio.Event], Awaitable[object]]) -> bool:
    event = asyncio.Event()
    task = _loop(wait, event)
    await asyncio.sleep(0.01)  # the loop is waiting
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1.0)
    if not done:
        task.cancel()  # once more: it is waiting again, and this time nothing wakes it
        await asyncio.wait({task}, timeout=1.0)
    return bool(done) and task.cancelled()


async def test_a_cancellation_as_the_event_is_set_ends_the_loop() -> None:
    assert await _ends_when_cancelled_as_it_wakes(lambda event: wait_event(event, 60))


async def test_the_wait_for_it_replaces_loses_that_cancellation() -> None:
    """Why wait_event exists: on the project's Python 3.11 the same loop on asyncio.wait_for
    outlives its cancellation. (On 3.12, whose wait_for is fixed, this fails: wait_event can go.)"""
    assert sys.version_info[:2] == (3, 11)
    assert not await _ends_when_cancelled_as_it_wakes(lambda event: asyncio.wait_for(event.wait(), 60))


def test_the_service_never_waits_with_wait_for() -> None:
    root = Path(__file__).resolve().parents[2]
    sources = [*root.joinpath("app").rglob("*.py"), *root.joinpath("workers").rglob("*.py")]
    offenders = [
        str(path.relative_to(root))
        for path in sources
        if "testing" not in path.parts and "wait_for(" in path.read_text(encoding="utf-8")
    ]
    assert offenders == [], "use app.waiting's wait_event or bounded instead of asyncio.wait_for"
