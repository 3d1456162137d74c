"""`kill -USR1 <pid>` logs every asyncio task of the process with the chain of awaits it is
suspended in: what an operator (or a chaos run) needs when something is stuck and the process
is idle."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

log = logging.getLogger("pgcontroller.tasks")

# Deep enough for any await chain of this code base; a cycle cannot loop forever.
_MAX_DEPTH = 40


def _await_chain(coro: Any) -> list[str]:
    lines = []
    for _ in range(_MAX_DEPTH):
        frame = (
            getattr(coro, "cr_frame", None)
            or getattr(coro, "gi_frame", None)
            or getattr(coro, "ag_frame", None)
        )
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaited = (
            getattr(coro, "cr_await", None)
            or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )
        if awaited is None:
            if coro is not None and frame is None:
                lines.append(f"  waiting on {coro!r}"[:300])
            break
        coro = awaited
    return lines


def dump_tasks() -> None:
    tasks = asyncio.all_tasks()
    text = []
    for task in sorted(tasks, key=lambda t: t.get_name()):
        text.append(f"--- {task.get_name()}")
        text.extend(_await_chain(task.get_coro()))
    log.warning("%d asyncio tasks:\n%s", len(tasks), "\n".join(text))


def dump_tasks_on_sigusr1() -> None:
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
