"""A stop request must end the process. Every step of the ordered shutdown has its own bound, but a
step that never returns (a peer that stops answering, a task that swallows its cancellation) would
keep a stopped process alive until an orchestrator kills it, with nothing in the log to say why.
So once shutdown begins, a timer thread (it runs even when the event loop is stuck) waits out the
whole budget; if the process is still here then, it logs what is still pending, every task's and
thread's stack, and exits with EXIT_SHUTDOWN_OVERRAN. Acknowledged data is already in PostgreSQL,
so cutting the shutdown short loses nothing."""

from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import os
import sys
import threading

log = logging.getLogger("pgcontroller")

EXIT_SHUTDOWN_OVERRAN = 3


def shutdown_budget_s(drain_s: float, shutdown_timeout_s: float) -> float:
    """The drain window, then the shutdown timeout twice over: the ordered steps share one timeout
    between them, and the second is slack for the steps without their own bound (closing
    sessions, stopping an embedded PostgreSQL, the runtime's own teardown)."""
    return drain_s + 2 * shutdown_timeout_s


class ShutdownWatchdog:
    """Armed when shutdown begins, disarmed when it has finished (a process that serves more than
    once, as a test's does, must not be cut down by an earlier shutdown's timer)."""

    def __init__(self, budget_s: float) -> None:
        self._budget_s = budget_s
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is not None:
            return
        self._timer = threading.Timer(
            self._budget_s, _overran, args=(self._budget_s, asyncio.get_running_loop())
        )
        self._timer.name = "shutdown-watchdog"
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _overran(budget_s: float, loop: asyncio.AbstractEventLoop) -> None:
    try:
        log.error(
            "shutdown did not finish within %.1f s; exiting anyway. Still pending:\n%s",
            budget_s,
            _pending_tasks(loop),
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for handler in logging.getLogger().handlers:
            handler.flush()
    finally:
        os._exit(EXIT_SHUTDOWN_OVERRAN)


def _pending_tasks(loop: asyncio.AbstractEventLoop) -> str:
    # Read from another thread while the loop may still run: good enough for a last word, and any
    # failure to read is itself reported rather than allowed to stop the exit.
    out = io.StringIO()
    try:
        for task in asyncio.all_tasks(loop):
            out.write(f"task {task.get_name()}:\n")
            task.print_stack(limit=8, file=out)
    except Exception as unreadable:
        out.write(f"(tasks unreadable: {unreadable!r})\n")
    return out.getvalue()
