"""KeyedQueues: strict order per key, concurrency across keys under the ceiling, retry-later
keeps its place, idle workers exit, shutdown drains then cancels, no task is leaked."""

from __future__ import annotations

import asyncio

from workers.keyed import KeyedQueues, RetryLater


def own_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t.get_name().startswith("key:")}


async def test_items_of_one_key_run_in_order_and_keys_run_concurrently() -> None:
    log: list[tuple[str, int]] = []
    running = 0
    peak = 0

    async def process(item: tuple[str, int]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        log.append(item)
        running -= 1

    queues: KeyedQueues[str, tuple[str, int]] = KeyedQueues(process, ceiling=3, idle_s=0.05)
    for i in range(5):
        for key in "abcde":
            queues.submit(key, (key, i))
    await asyncio.sleep(0.5)
    for key in "abcde":
        assert [i for k, i in log if k == key] == [0, 1, 2, 3, 4]
    assert peak == 3  # five keys wanted to run; the ceiling held them to three
    await asyncio.sleep(0.1)
    assert queues.active_keys == 0 and not own_tasks()  # idle workers exited


async def test_retry_later_keeps_the_item_ahead_of_its_successors_and_frees_its_slot() -> None:
    log: list[str] = []
    attempts: dict[str, int] = {}

    async def process(item: str) -> RetryLater[str] | None:
        attempts[item] = attempts.get(item, 0) + 1
        if item == "a1" and attempts[item] < 3:
            return RetryLater(item, 0.05)
        log.append(item)
        return None

    queues: KeyedQueues[str, str] = KeyedQueues(process, ceiling=1, idle_s=0.05)
    queues.submit("a", "a1")
    queues.submit("a", "a2")
    queues.submit("b", "b1")
    await asyncio.sleep(0.4)
    # b1 ran while a1 slept (the single slot was free); a2 never overtook a1.
    assert log.index("b1") < log.index("a1") < log.index("a2")
    assert attempts["a1"] == 3
    await queues.shutdown(1)


async def test_shutdown_drains_within_the_timeout_then_cancels() -> None:
    finished: list[str] = []
    cancelled: list[str] = []

    async def process(item: str) -> None:
        try:
            await asyncio.sleep(0.05 if item == "quick" else 10)
            finished.append(item)
        except asyncio.CancelledError:
            cancelled.append(item)
            raise

    queues: KeyedQueues[str, str] = KeyedQueues(process, ceiling=5, idle_s=5)
    queues.submit("q", "quick")
    queues.submit("s", "slow")
    queues.submit("idle", "quick")
    await asyncio.sleep(0.1)  # "idle" finished and now waits on its empty queue
    loop = asyncio.get_running_loop()
    began = loop.time()
    await queues.shutdown(0.3)
    assert loop.time() - began < 1.0  # the idle worker did not hold shutdown for 5 s
    assert finished == ["quick", "quick"] and cancelled == ["slow"]
    assert not own_tasks()


async def test_a_processor_that_raises_does_not_kill_its_key() -> None:
    done: list[str] = []

    async def process(item: str) -> None:
        if item == "bad":
            raise RuntimeError("boom")
        done.append(item)

    queues: KeyedQueues[str, str] = KeyedQueues(process, ceiling=1, idle_s=0.05)
    queues.submit("k", "bad")
    queues.submit("k", "good")
    await asyncio.sleep(0.1)
    assert done == ["good"]
    await queues.shutdown(1)


async def test_cancel_where_stops_only_matching_keys() -> None:
    started: list[str] = []

    async def process(item: str) -> None:
        started.append(item)
        await asyncio.sleep(10)

    queues: KeyedQueues[str, str] = KeyedQueues(process, ceiling=5, idle_s=5)
    queues.submit("lost/x", "1")
    queues.submit("kept/y", "2")
    await asyncio.sleep(0.05)
    assert queues.cancel_where(lambda key: key.startswith("lost/")) == 1
    await asyncio.sleep(0.01)
    assert queues.active_keys == 1
    await queues.shutdown(0.05)
    assert not own_tasks()
