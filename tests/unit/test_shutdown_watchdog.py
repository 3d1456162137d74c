"""The shutdown watchdog, in a child interpreter of its own: when it fires it ends the whole
process, which must not be the test runner."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from app.wiring.shutdown_watchdog import EXIT_SHUTDOWN_OVERRAN, shutdown_budget_s

_CHILD = textwrap.dedent(
    """
    import asyncio, logging, sys
    from app.wiring.shutdown_watchdog import ShutdownWatchdog

    async def swallows_its_cancellation() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    async def main(disarm: bool) -> None:
        watchdog = ShutdownWatchdog(0.3)
        watchdog.arm()
        if disarm:
            watchdog.disarm()
            await asyncio.sleep(0.8)
            print("still serving", flush=True)
            return
        stuck = asyncio.create_task(swallows_its_cancellation(), name="stuck-step")
        await asyncio.sleep(0)
        stuck.cancel()
        await stuck  # never returns: the cancellation is swallowed

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(sys.argv[1] == "disarm"))
    """
)


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=30, check=False
    )


def test_a_shutdown_stuck_past_its_budget_exits_and_says_what_it_was_waiting_on() -> None:
    started = time.monotonic()
    child = _run("hang")
    assert child.returncode == EXIT_SHUTDOWN_OVERRAN, child.stderr
    assert time.monotonic() - started < 10
    assert "shutdown did not finish within 0.3 s" in child.stderr
    assert "task stuck-step" in child.stderr
    assert "swallows_its_cancellation" in child.stderr
    # faulthandler's dump names the thread the event loop was stuck in.
    assert "Current thread" in child.stderr or "Thread 0x" in child.stderr


def test_a_disarmed_watchdog_leaves_the_process_alone() -> None:
    child = _run("disarm")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "still serving"
    assert "shutdown did not finish" not in child.stderr


def test_the_budget_is_the_drain_then_the_shutdown_timeout_twice() -> None:
    assert shutdown_budget_s(5.0, 5.0) == 15.0
    assert shutdown_budget_s(0.0, 2.5) == 5.0
