"""Owns request buckets through session advisory locks.

It tries to lock every bucket not yet held; a failure of the lock session means every lock
is gone, so ownership drops to nothing at once (the dispatcher then forgets those buckets'
requests) and is re-acquired once the database answers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.errors import StoreUnavailable
from app.ports import AdvisoryLocks

log = logging.getLogger("pgcontroller.buckets")

REQUEST_BUCKETS_LOCK_NAMESPACE = 0x5047_4301


class BucketOwner:
    def __init__(
        self,
        locks: AdvisoryLocks,
        namespace: int,
        bucket_count: int,
        *,
        on_lost: Callable[[frozenset[int]], None] = lambda _lost: None,
        on_gained: Callable[[frozenset[int]], None] = lambda _gained: None,
        interval_s: float = 1.0,
    ) -> None:
        self._locks = locks
        self._namespace = namespace
        self._count = bucket_count
        self._on_lost = on_lost
        self._on_gained = on_gained
        self._interval_s = interval_s
        self._owned: frozenset[int] = frozenset()
        self._session = asyncio.Lock()  # one round or the release at a time, never both
        self._released = False
        self.first_round = asyncio.Event()

    def owned(self) -> frozenset[int]:
        return self._owned

    def owns(self, bucket: int) -> bool:
        return bucket in self._owned

    async def run(self) -> None:
        """Returns only after `release`."""
        while True:
            async with self._session:
                if self._released:
                    return
                try:
                    await self._round()
                except StoreUnavailable as exc:
                    self._lose_all(exc)
                    # End the session for sure, so no lock lingers that we believe we lost.
                    await self._locks.reset()
            self.first_round.set()
            await asyncio.sleep(self._interval_s)

    async def _round(self) -> None:
        if self._owned:
            await self._locks.check_alive()
        gained: set[int] = set()
        for bucket in range(self._count):
            if bucket not in self._owned and await self._locks.try_lock(self._namespace, bucket):
                gained.add(bucket)
        if gained:
            self._owned = self._owned | gained
            log.info("now owning request buckets %s", sorted(self._owned))
            self._on_gained(frozenset(gained))

    def _lose_all(self, exc: Exception) -> None:
        lost, self._owned = self._owned, frozenset()
        if lost:
            log.warning("lock session lost (%s): released request buckets %s", exc, sorted(lost))
            self._on_lost(lost)

    async def release(self) -> None:
        """Orderly shutdown: give the buckets back at once instead of at session end."""
        async with self._session:
            self._released = True
            lost, self._owned = self._owned, frozenset()
            if lost:
                self._on_lost(lost)
            await self._locks.reset()
