"""Finds streams whose createStream was cut off (client timeout, outage, crash) and files a create
request for each, so every stream leaves CREATING without a client repeating the create.

The CREATING row is itself the durable intent: a creation that started more than `takeover_s`
ago and is still CREATING has lost its call (or is very slow; finishing is idempotent). Each
process sweeps the request buckets it owns, so the request runs where that stream's requests run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from app.domain.errors import StoreUnavailable
from app.ports import Clock

log = logging.getLogger("pgcontroller.creation")


class CreationSweeps(Protocol):
    async def file_creation_finishers(
        self, started_before: int, buckets: Sequence[int], now_ms: int
    ) -> int: ...


class CreationSweeper:
    def __init__(
        self,
        streams: CreationSweeps,
        clock: Clock,
        owned_buckets: Callable[[], frozenset[int]],
        *,
        takeover_s: float,
    ) -> None:
        self._streams = streams
        self._clock = clock
        self._owned = owned_buckets
        self._takeover_ms = int(takeover_s * 1000)
        # Sweeping twice per takeover period finishes a cut-off create within 1.5 periods.
        self._interval_s = takeover_s / 2

    async def run(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except StoreUnavailable as exc:
                log.warning("cannot look for interrupted stream creations: %s", exc)
            await asyncio.sleep(self._interval_s)

    async def sweep_once(self) -> int:
        buckets = self._owned()
        if not buckets:
            return 0
        now = self._clock.now_ms()
        filed = await self._streams.file_creation_finishers(now - self._takeover_ms, sorted(buckets), now)
        if filed:
            log.info("filed %d request(s) to finish stream creations that were cut off", filed)
        return filed
