"""Helpers for several real `serve` processes on one database: start them, read each one's own
view of what it holds (REST /v1/cluster/self), and check shares and overlaps."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from app.testing.served import ServedProcess, start_served

ServiceOwned = Mapping[str, frozenset[int]]


async def start_member(
    root: Path, name: str, db_url: str, *args: str, env: dict[str, str] | None = None
) -> ServedProcess:
    work = root / name
    work.mkdir(parents=True, exist_ok=True)
    return await start_served(work, "--db-url", db_url, "--instance-id", name, *args, env=env)


async def self_view(session: aiohttp.ClientSession, served: ServedProcess) -> dict[str, Any] | None:
    """The process's own view, or None while it cannot answer (starting, dying)."""
    try:
        async with session.get(
            f"{served.rest_base}/v1/cluster/self", timeout=aiohttp.ClientTimeout(total=2)
        ) as resp:
            if resp.status != 200:
                return None
            body: dict[str, Any] = await resp.json()
            return body
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def owned_by(
    session: aiohttp.ClientSession, members: Sequence[ServedProcess]
) -> list[ServiceOwned | None]:
    views = await asyncio.gather(*(self_view(session, m) for m in members))
    return [
        None if view is None else {service: frozenset(buckets) for service, buckets in view["owned"].items()}
        for view in views
    ]


def overlap(views: Sequence[ServiceOwned | None]) -> dict[str, set[int]]:
    """Buckets claimed by more than one of the answering processes, per service."""
    seen: dict[str, set[int]] = {}
    twice: dict[str, set[int]] = {}
    for view in views:
        for service, buckets in (view or {}).items():
            held = seen.setdefault(service, set())
            twice.setdefault(service, set()).update(held & buckets)
            held.update(buckets)
    return {service: buckets for service, buckets in twice.items() if buckets}


def is_fair(views: Sequence[ServiceOwned | None], counts: Mapping[str, int]) -> bool:
    """Every process answered, every bucket held exactly once, shares within one."""
    if any(view is None for view in views):
        return False
    for service, count in counts.items():
        sizes = [len(view[service]) for view in views if view is not None]
        held = [b for view in views if view is not None for b in view[service]]
        if sorted(held) != list(range(count)) or max(sizes) - min(sizes) > 1:
            return False
    return True


async def kill(served: ServedProcess) -> None:
    served.process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(served.process.wait(), 10)
