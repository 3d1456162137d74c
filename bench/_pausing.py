"""`--other paused`: the server not being measured is stopped for the other's round, every process
of it (Pravega's JVM; serve's processes and its PostgreSQL's) getting SIGSTOP before the round and
SIGCONT after it, whatever happens in between. Each round then has the two cores to itself.

What it shows: at nice 19 (the default, bench/_niceness.py) Pravega's idle JVM still takes 8-19%
of a core during serve's rounds (its collector, compiler threads and timers wake whether or not it
has work), where serve's idle processes and PostgreSQL take 0-2% of Pravega's. On two cores that
is not noise for a round bound by one busy process: serve's eight-client transactions did 132-146
a second with the JVM niced beside it and 148-175 with it paused, alternating (stop 64,
docs/performance.md).

Why it is not the default: a pause stops Pravega's ZooKeeper server and its clients together (all
in the standalone's JVM), and a pause longer than their 10 s sessions expires them. Pravega's
first createStream after a pause of half a minute fails INTERNAL (the bench asks a resumed server
once before measuring it: Target.answering_after_pause), and in one of two full runs the bench's
next step on Pravega, resumed for about the fifteenth time, never returned (the run was killed
after 25 minutes). Pauses are not something a Pravega
deployment is built to sit through; serve and its PostgreSQL are (a stopped process keeps its
memory and sockets; its peers wait).
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
    when the block raises or is cancelled: a server is never left stopped (but for a bench killed
    outright: bench/beside_pravega.py turns SIGTERM into a cancellation)."""
    stopped: list[int] = []
    try:
        for pids in pid_lists:
            stopped += _signal_all(pids(), signal.SIGSTOP)
        yield
    finally:
        _signal_all(stopped, signal.SIGCONT)
