"""Who holds what, sampled: both serves' own views (`/v1/cluster/self`) every 100 ms, and the
instants two of them claimed the leadership or one bucket at once."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp

from app.testing.served import ServedProcess


class Overlaps:
    """Samples both serves' own view of what they hold; counts the instants they overlapped."""

    def __init__(self, serves: list[ServedProcess]) -> None:
        self._serves = serves
        self.samples = 0
        self.leaders_twice = 0
        self.buckets_twice = 0
        self.unanswered = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while not self._stop.is_set():
                views = await asyncio.gather(*(self._view(http, s) for s in self._serves))
                self.samples += 1
                if any(view is None for view in views):
                    self.unanswered += 1
                else:
                    self._count([view for view in views if view is not None])
                await asyncio.sleep(0.1)

    def _count(self, views: list[dict[str, Any]]) -> None:
        if sum(bool(view["leader"]) for view in views) > 1:
            self.leaders_twice += 1
        held: Counter[tuple[str, int]] = Counter()
        for view in views:
            for service, buckets in view["owned"].items():
                held.update((service, bucket) for bucket in buckets)
        if any(count > 1 for count in held.values()):
            self.buckets_twice += 1

    @staticmethod
    async def _view(http: aiohttp.ClientSession, served: ServedProcess) -> dict[str, Any] | None:
        try:
            async with http.get(f"{served.rest_base}/v1/cluster/self") as response:
                if response.status != 200:
                    return None
                view: dict[str, Any] = await response.json()
                return view
        except (aiohttp.ClientError, TimeoutError):
            return None

    def stop(self) -> None:
        self._stop.set()
