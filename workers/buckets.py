"""Claims the buckets of one service that the leader assigned to this process.

A bucket is worked only while this process holds its session advisory lock *and* the claim
it wrote when taking it (owner, new generation). Reassigned buckets are released: their work
is stopped first (`on_lost`), then the lock is given up, then the claim is cleared. Losing the
lock session loses every bucket at once (`lose_all`, called by the cluster loop). The
generation is the fence: a write made under an older generation matches no row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.domain.cluster import BucketRow, BucketService, Fence
from app.domain.errors import WriteConflict
from app.observability.logs import number_ranges
from app.ports import AdvisoryLocks, Clock, ClusterStore

log = logging.getLogger("pgcontroller.buckets")

LOCK_NAMESPACES: dict[BucketService, int] = {
    BucketService.REQUESTS: 0x5047_4301,
    BucketService.RETENTION: 0x5047_4302,
    BucketService.WATERMARKS: 0x5047_4303,
}


class BucketClaims:
    def __init__(
        self,
        service: BucketService,
        locks: AdvisoryLocks,
        store: ClusterStore,
        clock: Clock,
        member_id: str,
        *,
        on_lost: Callable[[frozenset[int]], None] = lambda _lost: None,
        on_gained: Callable[[frozenset[int]], None] = lambda _gained: None,
    ) -> None:
        self.service = service
        self._namespace = LOCK_NAMESPACES[service]
        self._locks = locks
        self._store = store
        self._clock = clock
        self._member_id = member_id
        self._on_lost = on_lost
        self._on_gained = on_gained
        self._fences: dict[int, Fence] = {}
        self._assigned: frozenset[int] | None = None

    def owned(self) -> frozenset[int]:
        return frozenset(self._fences)

    @property
    def assigned(self) -> frozenset[int] | None:
        """The buckets the cluster assigned here at the last reconcile; None before the first."""
        return self._assigned

    def owns(self, bucket: int) -> bool:
        return bucket in self._fences

    def fence_for(self, bucket: int) -> Fence | None:
        return self._fences.get(bucket)

    async def reconcile(self) -> None:
        """Releases buckets assigned elsewhere, then claims those assigned here."""
        rows = await self._store.bucket_rows(self.service)
        mine = {row.bucket: row for row in rows if row.assigned_to == self._member_id}
        self._assigned = frozenset(mine)
        released: list[int] = []
        try:
            for bucket in sorted(set(self._fences) - set(mine)):
                if await self._release(bucket):
                    released.append(bucket)
        finally:
            # One line per round, as claims are: those released before a failure too.
            if released:
                log.info(
                    "%s buckets released (reassigned): %s (%d; now %d)",
                    self.service,
                    number_ranges(released),
                    len(released),
                    len(self._fences),
                )
        gained: set[int] = set()
        for bucket, row in mine.items():
            if bucket not in self._fences and await self._claim(row):
                gained.add(bucket)
        if gained:
            log.info(
                "%s buckets claimed: %s (%d; now %d)",
                self.service,
                number_ranges(gained),
                len(gained),
                len(self._fences),
            )
            self._on_gained(frozenset(gained))

    async def _claim(self, row: BucketRow) -> bool:
        # The previous holder may still hold the lock while it finishes releasing: try later.
        if not await self._locks.try_lock(self._namespace, row.bucket):
            return False
        try:
            fence = await self._store.claim_bucket(row, self._member_id, self._clock.now_ms())
        except WriteConflict:
            # Reassigned while we were taking it; the next round reads the row again.
            await self._locks.unlock(self._namespace, row.bucket)
            return False
        self._fences[row.bucket] = fence
        return True

    async def _release(self, bucket: int) -> bool:
        """False when the bucket went meanwhile: the lock session closed during an earlier
        release of this round (lose_all), and there is nothing left to give up."""
        fence = self._fences.pop(bucket, None)
        if fence is None:
            return False
        self._on_lost(frozenset({bucket}))
        await self._locks.unlock(self._namespace, bucket)
        await self._store.release_bucket(fence, self._member_id)
        return True

    def lose_all(self, reason: object, *, orderly: bool = False) -> None:
        """`orderly`: released on shutdown (INFO), not taken away (WARNING)."""
        lost, self._fences = frozenset(self._fences), {}
        if lost:
            level, verb = (logging.INFO, "released") if orderly else (logging.WARNING, "lost")
            log.log(level, "%s buckets %s (%s): %s", self.service, verb, reason, number_ranges(lost))
            self._on_lost(lost)
