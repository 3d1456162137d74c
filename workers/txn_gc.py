"""Garbage-collects completed-transaction records (Pravega keeps them one to two TTLs, then UNKNOWN).

A record is kept for between one and two TTLs: records are grouped in TTL-long batches by
completion time, and every batch older than the previous one is deleted. Running it in
every process would be harmless (the delete is idempotent), but it is a cluster-wide sweep, so
only the leader runs it; a failed round is retried next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.errors import StoreUnavailable
from app.domain.txns import TxnLimits
from app.ports import Clock, TxnStore

log = logging.getLogger("pgcontroller.txn-gc")


class CompletedTxnGc:
    def __init__(
        self,
        txns: TxnStore,
        clock: Clock,
        limits: TxnLimits,
        *,
        interval_s: float | None = None,
        leads: Callable[[], bool] = lambda: True,
    ) -> None:
        self._txns = txns
        self._leads = leads
        self._clock = clock
        self._limits = limits
        # A tenth of the TTL (capped at an hour) keeps the one-to-two TTL bound tight.
        self._interval_s = (
            interval_s if interval_s is not None else min(limits.completed_ttl_ms / 10_000, 3600.0)
        )

    async def run(self) -> None:
        while True:
            try:
                if self._leads():
                    await self.collect_once()
            except StoreUnavailable as exc:
                log.warning("cannot collect completed transactions: %s", exc)
            await asyncio.sleep(self._interval_s)

    async def collect_once(self) -> int:
        removed = await self._txns.gc_completed(self._limits.gc_cutoff(self._clock.now_ms()))
        if removed:
            log.info("removed %d completed-transaction records", removed)
        return removed
