"""Aborts transactions whose lease ran out, for the buckets this process owns.

There is no in-memory timer to lose: lease expiries are indexed rows, so after a crash or a
bucket hand-over the new owner finds the same expired rows. Each abort is conditional on the
version the sweep read; a ping that extended the lease in between wins (WriteConflict), and
the transaction is left alone, as Pravega's timer does. The loop survives a database restart:
a failed sweep is logged and tried again at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.errors import NotFound, StoreUnavailable, WriteConflict
from app.domain.requests import NewRequest, Processor, RequestKind
from app.domain.txns import TxnLimits, TxnStatus
from app.metrics.registry import counter
from app.ports import Clock, TxnStore

_TIMED_OUT = counter("pravega_controller_transactions_timedout")
log = logging.getLogger("pgcontroller.txn-timeouts")


class TxnTimeoutSweeper:
    def __init__(
        self,
        txns: TxnStore,
        clock: Clock,
        owned_buckets: Callable[[], frozenset[int]],
        limits: TxnLimits,
        *,
        tick_s: float = 0.4,
        batch: int = 500,
    ) -> None:
        self._txns = txns
        self._clock = clock
        self._owned = owned_buckets
        self._limits = limits
        self._tick_s = tick_s
        self._batch = batch
        self._running = False

    @property
    def running(self) -> bool:
        """Whether the timeout service runs in this process (a ping says DISCONNECTED if not)."""
        return self._running

    async def run(self) -> None:
        self._running = True
        try:
            while True:
                try:
                    swept = await self.sweep_once()
                except StoreUnavailable as exc:
                    log.warning("cannot sweep expired transactions: %s", exc)
                    swept = 0
                if swept < self._batch:
                    await asyncio.sleep(self._tick_s)
        finally:
            self._running = False

    async def sweep_once(self) -> int:
        """Aborts what has expired in the owned buckets; returns how many expired rows it saw."""
        buckets = self._owned()
        if not buckets:
            return 0
        now = self._clock.now_ms()
        expired = await self._txns.expired(sorted(buckets), now - self._limits.timeout_grace_ms, self._batch)
        for txn in expired:
            try:
                await self._txns.move_txn(
                    txn.scope,
                    txn.stream,
                    txn.txn,
                    TxnStatus.ABORTING,
                    txn.version,
                    NewRequest(RequestKind.ABORT_TXN, txn.scope, txn.stream, now, processor=Processor.ABORTS),
                )
                _TIMED_OUT.inc()
                log.info("transaction %s of %s/%s timed out; aborting", txn.txn, txn.scope, txn.stream)
            except (WriteConflict, NotFound):
                continue  # pinged, committed or gone meanwhile: give up silently, as Pravega does
        return len(expired)
