"""The chaos run's `serve --processes N` member: a supervisor and its children behind shared ports.
Invariant it serves: a fault meant for the whole member reaches every process of it (a SIGKILL of
the supervisor alone would let its children stop in order, which is no crash), a fault meant for
one child reaches that child only, and the member's bucket views are each child's own, although
one REST port answers for all of them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp

from app.testing.cluster import ServiceOwned

# Each fresh connection lands on a child chosen by the kernel's hash of its source port: this many
# tries miss a live child with a chance of 2^-(TRIES-1) per sample.
VIEW_TRIES = 24
CHILD_EXIT = re.compile(r"controller process (\d+) \(pid (\d+)\) exited with")


def child_pids(ready_file: Path) -> list[int | None]:
    """The supervisor's children by index, as its ready file names them (None: being restarted)."""
    info: dict[str, Any] = json.loads(ready_file.read_text())
    return [None if pid is None else int(pid) for pid in info["processes"]]


def signal_tree(supervisor: int, ready_file: Path, sig: signal.Signals) -> None:
    """`sig` to the supervisor first (so a SIGKILL leaves nobody to restart a child), then to every
    child it names; a process already gone is skipped."""
    pids = [supervisor, *(pid for pid in child_pids(ready_file) if pid is not None)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def child_back(ready_file: Path, index: int, old_pid: int, timeout_s: float) -> bool:
    """True once the supervisor names a new, ready child at `index` (it rewrites its ready file only
    when the restarted child is ready); False at the bound."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = child_pids(ready_file)
        if pids[index] is not None and pids[index] != old_pid:
            return True
        await asyncio.sleep(0.1)
    return False


def child_exits(log_text: str) -> int:
    """How many child deaths the supervisor has logged (each is followed by its restart)."""
    return len(CHILD_EXIT.findall(log_text))


async def children_views(rest_base: str, processes: int) -> list[dict[str, frozenset[int]] | None]:
    """Each child's own view (REST /v1/cluster/self), by member id; a child that never answered
    (down, or being restarted) is None. A new connection per try, so the kernel picks afresh."""
    seen: dict[str, ServiceOwned] = {}
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for _ in range(VIEW_TRIES):
            try:
                async with session.get(f"{rest_base}/v1/cluster/self") as resp:
                    if resp.status == 200:
                        body = await resp.json()
                        seen[body["id"]] = {s: frozenset(b) for s, b in body["owned"].items()}
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass  # a child dying mid-answer: the next connection may land on the other
            if len(seen) == processes:
                break
    views: list[dict[str, frozenset[int]] | None] = [dict(view) for view in seen.values()]
    return views + [None] * (processes - len(views))
