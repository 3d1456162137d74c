"""EndOfTurn (app/turns.py): one flush at the end of the turn, however often it is asked for."""

from __future__ import annotations

import asyncio

from app.turns import EndOfTurn


async def next_turn() -> None:
    # Two sleeps: the first lets the callbacks queued so far run, the second those they queued.
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_asked_many_times_in_a_turn_it_flushes_once_after_the_turn() -> None:
    gathered: list[int] = []
    flushes: list[list[int]] = []

    def flush() -> None:
        flushes.append(gathered.copy())
        gathered.clear()

    turn = EndOfTurn(flush)
    for i in range(5):
        gathered.append(i)
        turn.ask()
    assert flushes == [] and turn.scheduled
    await next_turn()
    assert flushes == [[0, 1, 2, 3, 4]] and not turn.scheduled
    gathered.append(5)
    turn.ask()
    await next_turn()
    assert flushes == [[0, 1, 2, 3, 4], [5]]


async def test_it_runs_after_the_callbacks_queued_before_the_first_ask() -> None:
    order: list[str] = []
    loop = asyncio.get_running_loop()
    loop.call_soon(order.append, "queued before")
    turn = EndOfTurn(lambda: order.append("flush"))
    turn.ask()
    loop.call_soon(order.append, "queued after")
    turn.ask()
    await next_turn()
    assert order == ["queued before", "flush", "queued after"]


async def test_asked_by_its_own_flush_it_runs_again_in_a_later_turn() -> None:
    runs: list[int] = []

    def flush() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            turn.ask()

    turn = EndOfTurn(flush)
    turn.ask()
    await asyncio.sleep(0)
    assert runs == [0]
    await next_turn()
    await next_turn()
    assert runs == [0, 1, 2]


async def test_a_failing_flush_does_not_stop_later_ones() -> None:
    loop = asyncio.get_running_loop()
    seen: list[object] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context.get("exception")))
    calls = 0

    def flush() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first flush fails")

    try:
        turn = EndOfTurn(flush)
        turn.ask()
        await next_turn()
        turn.ask()
        await next_turn()
    finally:
        loop.set_exception_handler(previous)
    assert calls == 2
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError)
