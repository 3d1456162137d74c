"""The periodic watermark job (Pravega's PeriodicWatermarking) for the watermark buckets this process owns.

Every period one pass walks the member streams of the owned buckets in pages of stream ids,
one page at a time (so at most one page's queries are in flight and the pool stays free for
RPCs). Each stream's writes carry the fence of its bucket as this pass saw it: a bucket lost
mid-pass makes its later streams skip and any write already sent land nowhere. A failed pass
(the database went away) is logged and the next one starts at the next tick; a page whose
batched write failed on a stream deleted meanwhile is dropped for this pass only. Cancelling
`run` stops between statements; nothing half-written is left (each write is one statement).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.cluster import Fence
from app.domain.errors import StoreUnavailable, WriteConflict
from app.ports import Clock
from app.services.watermarks import RoundSummary, WatermarkService

log = logging.getLogger("pgcontroller.watermarking")

DEFAULT_PAGE_SIZE = 50


class WatermarkWorker:
    def __init__(
        self,
        service: WatermarkService,
        owned: Callable[[], frozenset[int]],
        bucket_count: int,
        fence_for: Callable[[int], Fence | None],
        clock: Clock,
        *,
        period_ms: int,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        if period_ms <= 0 or page_size <= 0:
            raise ValueError("the watermark period and page size must be positive")
        self._service = service
        self._owned = owned
        self._bucket_count = bucket_count
        self._fence_for = fence_for
        self._clock = clock
        self._period_s = period_ms / 1000
        self._page_size = page_size

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                summary = await self.run_once()
                if summary.streams or summary.skipped:
                    log.debug("watermark pass: %s in %.3fs", summary, loop.time() - started)
            except StoreUnavailable as exc:
                log.warning("watermark pass failed, retrying next period: %s", exc)
            # Start to start: a pass longer than the period is followed at once by the next.
            await asyncio.sleep(max(0.0, started + self._period_s - loop.time()))

    async def run_once(self) -> RoundSummary:
        """One pass over every member stream of the owned buckets."""
        buckets = sorted(self._owned())
        total = RoundSummary()
        after = 0
        while buckets:
            page = await self._service.members(buckets, self._bucket_count, after, self._page_size)
            if not page:
                break
            fences = {bucket: self._fence_for(bucket) for bucket in {m.bucket for m in page}}
            try:
                total += await self._service.process(page, fences, self._clock.now_ms())
            except WriteConflict as exc:
                # A stream of the page was deleted under a batched write (its foreign key
                # failed the statement): this page waits for the next pass, the others go on.
                log.info("watermark page after stream %d dropped this pass: %s", after, exc)
            if len(page) < self._page_size:
                break
            after = page[-1].stream_id
        return total
