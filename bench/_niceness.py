"""The server not being measured runs at a low priority during the other's round: its own
background work (a JVM's collector, a PostgreSQL's checkpoint or autovacuum, a controller's
heartbeats) then takes only cycles the measured server leaves, as on a machine of its own, and
both servers are treated alike.

Linux keeps a nice value per thread, so every thread of every process is set, and set back at
the end (threads and processes started meanwhile, such as a new PostgreSQL backend, inherit the
low value and are set back too). Raising a priority back needs root (CAP_SYS_NICE): without it
nothing is lowered.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress


def can_restore() -> bool:
    return os.geteuid() == 0


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _set_all(pids: list[int], value: Callable[[int], int]) -> None:
    for pid in pids:
        for tid in _threads(pid):
            with suppress(OSError):  # gone meanwhile
                os.setpriority(os.PRIO_PROCESS, tid, value(pid))


@contextmanager
def lowered(pid_lists: list[Callable[[], list[int]]], nice: int) -> Iterator[None]:
    """Every thread of the processes each callable lists at nice `nice` for the block; back to
    what each process had before (0 for one started meanwhile) after it."""
    if nice <= 0 or not can_restore():
        yield
        return
    before: dict[int, int] = {}
    listed = [pid for pids in pid_lists for pid in pids()]
    for pid in listed:
        try:
            before[pid] = os.getpriority(os.PRIO_PROCESS, pid)
        except OSError:
            continue
    _set_all(listed, lambda pid: nice)
    try:
        yield
    finally:
        _set_all([pid for pids in pid_lists for pid in pids()], lambda pid: before.get(pid, 0))
