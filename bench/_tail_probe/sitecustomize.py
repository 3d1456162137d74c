"""Diagnostics for bench/processes.py --probe: put this directory on PYTHONPATH of a serving process
and set PGCONTROLLER_TAIL_PROBE=<dir>. It times the collector's passes, every event-loop callback
and every loop iteration's busy stretch (select return to the next select), in wall time and in
the thread's CPU time (wall minus CPU is time the process waited for a core), and on SIGUSR2 writes
what it saw since the previous SIGUSR2 to <dir>/<pid>.json. Without the variable it does nothing."""

from __future__ import annotations

import asyncio.events
import collections
import gc
import json
import os
import selectors
import signal
import time
from typing import Any

_DIR = os.environ.get("PGCONTROLLER_TAIL_PROBE")
_SLOW_S = 0.002  # a stretch this long delays every call that arrives during it
_KEEP = 25


class _Seen:
    def __init__(self) -> None:
        self.gc: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self.gc_cpu: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self.collected: dict[int, int] = {0: 0, 1: 0, 2: 0}
        self.callbacks = 0
        self.slow_callbacks: dict[str, list[float]] = {}
        self.busy: list[float] = []
        self.busy_cpu: list[float] = []
        self.iterations = 0
        self.since = time.time()


def _install(directory: str) -> None:
    seen = _Seen()
    gc_started = [0.0, 0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[:] = [time.perf_counter(), time.thread_time()]
        else:
            seen.gc[info["generation"]].append(time.perf_counter() - gc_started[0])
            seen.gc_cpu[info["generation"]].append(time.thread_time() - gc_started[1])
            seen.collected[info["generation"]] += info["collected"]

    gc.callbacks.append(on_gc)

    run = asyncio.events.Handle._run

    def timed_run(self: asyncio.events.Handle) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        run(self)
        took = time.perf_counter() - started
        seen.callbacks += 1
        if took >= _SLOW_S:
            seen.slow_callbacks.setdefault(_name(self), []).append(time.thread_time() - cpu)

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    select = selectors.EpollSelector.select
    returned = [0.0, 0.0]

    def timed_select(self: selectors.EpollSelector, timeout: float | None = None) -> Any:
        if returned[0]:
            seen.busy.append(time.perf_counter() - returned[0])
            seen.busy_cpu.append(time.thread_time() - returned[1])
            seen.iterations += 1
        events = select(self, timeout)
        returned[:] = [time.perf_counter(), time.thread_time()]
        return events

    selectors.EpollSelector.select = timed_select  # type: ignore[method-assign]

    def dump(_signum: int, _frame: object) -> None:
        nonlocal seen
        old, seen = seen, _Seen()
        busy, busy_cpu = sorted(old.busy), sorted(old.busy_cpu)
        report = {
            "pid": os.getpid(),
            "seconds": time.time() - old.since,
            "gc": {
                str(gen): {
                    "count": len(p),
                    "total_ms": sum(p) * 1e3,
                    "max_ms": max(p, default=0) * 1e3,
                    "cpu_total_ms": sum(old.gc_cpu[gen]) * 1e3,
                    "cpu_max_ms": max(old.gc_cpu[gen], default=0) * 1e3,
                    "collected": old.collected[gen],
                }
                for gen, p in old.gc.items()
            },
            "gen2_objects": len(gc.get_objects(generation=2)),
            "gen2_widest": _widest(),
            "garbage": _garbage(),
            "frozen_objects": gc.get_freeze_count(),
            "gc_pauses_over_2ms": sum(1 for p in old.gc.values() for x in p if x >= _SLOW_S),
            "callbacks": old.callbacks,
            "slow_callbacks": sorted(
                (
                    {"name": k, "count": len(v), "cpu_max_ms": max(v) * 1e3}
                    for k, v in old.slow_callbacks.items()
                ),
                key=lambda r: -r["count"],
            )[:_KEEP],
            "iterations": old.iterations,
            "busy_ms": {
                q: busy[min(len(busy) - 1, int(len(busy) * float(q)))] * 1e3 if busy else 0.0
                for q in ("0.5", "0.99", "0.999")
            },
            "busy_max_ms": busy[-1] * 1e3 if busy else 0.0,
            "busy_over_2ms": sum(1 for b in busy if b >= _SLOW_S),
            "busy_cpu_ms": {
                q: busy_cpu[min(len(busy_cpu) - 1, int(len(busy_cpu) * float(q)))] * 1e3 if busy_cpu else 0.0
                for q in ("0.5", "0.99", "0.999")
            },
            "busy_cpu_max_ms": busy_cpu[-1] * 1e3 if busy_cpu else 0.0,
            "busy_cpu_over_2ms": sum(1 for b in busy_cpu if b >= _SLOW_S),
        }
        tmp = os.path.join(directory, f"{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(report, out)
        os.replace(tmp, os.path.join(directory, f"{os.getpid()}.json"))

    signal.signal(signal.SIGUSR2, dump)


def _garbage() -> list[str]:
    """The types of the cyclic garbage waiting for the collector right now (only a cycle needs the
    collector: it is what a call leaves behind for the pauses)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        counts = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        cycles = [_cycle(o, gc.garbage) for o in _first_of_each_type(gc.garbage)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    shown = [f"{name} {count}" for name, count in counts.most_common(12)]
    return shown + [f"cycle: {c}" for c in cycles if c][:3]


def _first_of_each_type(garbage: list[Any]) -> list[Any]:
    firsts: dict[str, Any] = {}
    for o in garbage:
        firsts.setdefault(type(o).__qualname__, o)
    counts = collections.Counter(type(o).__qualname__ for o in garbage)
    return [firsts[name] for name, _ in counts.most_common(12)]


def _cycle(start: Any, garbage: list[Any]) -> str:
    """The shortest path of references from `start` back to itself through the garbage."""
    within = {id(o) for o in garbage}
    came_from: dict[int, Any] = {id(start): None}
    queue = collections.deque([start])
    while queue:
        o = queue.popleft()
        for r in gc.get_referents(o):
            if r is start:
                path = [o]
                while came_from[id(path[-1])] is not None:
                    path.append(came_from[id(path[-1])])
                return " -> ".join(_describe(x) for x in reversed(path)) + " -> (start)"
            if id(r) in within and id(r) not in came_from:
                came_from[id(r)] = o
                queue.append(r)
    return ""


def _describe(o: Any) -> str:
    kind = type(o).__qualname__
    name = getattr(o, "__qualname__", None) or getattr(getattr(o, "f_code", None), "co_name", None)
    if isinstance(o, dict):
        name = ",".join(str(k) for k in list(o)[:4])
    return f"{kind}({name})" if name else kind


def _widest() -> list[str]:
    """The old generation's containers with the most references: a full pass visits each one."""
    sized = sorted(
        ((len(gc.get_referents(o)), type(o).__qualname__) for o in gc.get_objects(generation=2)), reverse=True
    )
    return [f"{name} {size}" for size, name in sized[:5]]


def _name(handle: asyncio.events.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {owner.get_name()} {getattr(coro, '__qualname__', '')}"
    return getattr(callback, "__qualname__", repr(callback))[:120]


if _DIR:
    _install(_DIR)
