"""The server not being measured is paused for the other's round: every process of it (Pravega's
JVM; serve's processes and its PostgreSQL's) gets SIGSTOP before the round and SIGCONT after it,
whatever happens in between. Each round then has the two cores to itself, as on a machine of its
own.

Why not only a low priority (`--other niced`, bench/_niceness.py, the bench's way until stop 64):
at nice 19 Pravega's idle JVM still took 8-19% of a core during serve's rounds (its collector,
compiler threads and timers wake whether or not it has work), where serve's idle processes and
PostgreSQL took 2% of Pravega's. On two cores that is not noise for a round bound by one busy
process: serve's eight-client transactions did 132-146 a second with the JVM niced beside it and
148-175 with it paused, alternating (stop 64, docs/performance.md).

A paused process keeps its memory and its sockets; its peers' connections wait. Pravega 0.13
standalone (its ZooKeeper in the same JVM) answers as before after pauses of a part's length.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress


def _signal_all(pids: list[int], signum: signal.Signals) -> list[int]:
    """The processes that got it (one gone meanwhile is skipped)."""
    reached = []
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signum)
            reached.append(pid)
    return reached


@contextmanager
def paused(pid_lists: list[Callable[[], list[int]]]) -> Iterator[None]:
    """Every process each callable lists is stopped for the block and continued after it, also
    when the block raises or is cancelled: a server is never left stopped."""
    stopped: list[int] = []
    try:
        for pids in pid_lists:
            stopped += _signal_all(pids(), signal.SIGSTOP)
        yield
    finally:
        _signal_all(stopped, signal.SIGCONT)
