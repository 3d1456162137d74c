"""Periodic retention (Pravega's retention cycle) for the retention buckets this process owns.

Each pass lists the member streams of the owned buckets in one statement and runs the
retention cycle of those that are due, at most `concurrency` at a time. Schedule (Pravega's
bucket service): a stream is due one period after it was first seen here, or one period after
its latest record when it has one (so a bucket taken over keeps its streams' cadence), and
again one period after each cycle completes. The schedule lives in memory only; the records
in the database are what a new owner starts from.

Ownership: before each stream the bucket's Fence is asked for; None means the bucket was
lost and its remaining streams are dropped for this pass. The cycle's writes carry the Fence,
so a pass that lost its bucket mid-cycle writes nothing more. A cycle that fails is retried
up to 5 times with backoff, then left to the next period. A pass that cannot reach the
database is logged and tried again at the next tick; cancelling `run` cancels the cycles in
flight (their writes are single statements, so none is left half done).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from app.domain.cluster import Fence
from app.domain.errors import DomainError, StoreUnavailable
from app.metrics.registry import counter
from app.ports import Clock, RetentionMember, RetentionStore
from app.services.retention import CycleOutcome, RetentionService, TruncationStart

log = logging.getLogger("pgcontroller.retention")

_TRUNCATIONS = counter("pravega_controller_retention_frequency")
RETENTION_ATTEMPTS = 5  # RetryHelper.withRetriesAsync(..., 5) in PeriodicRetention


@dataclass
class RetentionPass:
    """What one pass did."""

    members: int = 0
    due: int = 0
    recorded: int = 0
    truncations: int = 0
    purged: int = 0
    failed: int = 0
    fenced: int = 0  # streams left because their bucket was lost before or during the cycle


class RetentionWorker:
    def __init__(
        self,
        retention: RetentionStore,
        service: RetentionService,
        clock: Clock,
        *,
        owned: Callable[[], frozenset[int]],
        bucket_count: int,
        fence_for: Callable[[int], Fence | None],
        frequency_ms: int,
        tick_s: float | None = None,
        concurrency: int = 16,
        attempts: int = RETENTION_ATTEMPTS,
        retry_delay_s: float = 0.1,
        max_retry_delay_s: float = 10.0,
    ) -> None:
        self._retention = retention
        self._service = service
        self._clock = clock
        self._owned = owned
        self._bucket_count = bucket_count
        self._fence_for = fence_for
        self._period_ms = frequency_ms
        # Due times are checked once a tick; a tenth of the period (at most 5 s) is precise
        # enough for a 30-minute period and lets tests use periods of a few hundred ms.
        self._tick_s = tick_s if tick_s is not None else min(5.0, max(0.05, frequency_ms / 10_000))
        self._concurrency = concurrency
        self._attempts = attempts
        self._retry_delay_s = retry_delay_s
        self._max_retry_delay_s = max_retry_delay_s
        self._next_due: dict[tuple[str, str], int] = {}

    async def run(self) -> None:
        """Runs passes until cancelled."""
        while True:
            try:
                await self.run_once()
            except StoreUnavailable as exc:
                log.warning("retention pass failed, trying again in %.1f s: %s", self._tick_s, exc)
            await asyncio.sleep(self._tick_s)

    async def run_once(self) -> RetentionPass:
        """One pass over the owned buckets' members: the due ones get their cycle."""
        buckets = self._owned()
        summary = RetentionPass()
        if not buckets:
            self._next_due.clear()
            return summary
        members = await self._retention.list_members(sorted(buckets), self._bucket_count)
        summary.members = len(members)
        due = self._due(members, self._clock.now_ms())
        summary.due = sum(len(streams) for streams in due.values())
        if not due:
            return summary
        slots = asyncio.Semaphore(self._concurrency)
        async with asyncio.TaskGroup() as group:
            for bucket, streams in due.items():
                for member in streams:
                    group.create_task(self._one(bucket, member, slots, summary))
        return summary

    def _due(self, members: list[RetentionMember], now: int) -> dict[int, list[RetentionMember]]:
        seen: set[tuple[str, str]] = set()
        due: dict[int, list[RetentionMember]] = defaultdict(list)
        for member in members:
            key = (member.scope, member.name)
            seen.add(key)
            next_due = self._next_due.get(key)
            if next_due is None:
                start = now if member.latest_recording_time is None else member.latest_recording_time
                next_due = self._next_due[key] = start + self._period_ms
            if next_due <= now:
                due[member.bucket].append(member)
        # Streams that left the owned buckets (deleted, sealed, policy removed, bucket lost).
        for key in [k for k in self._next_due if k not in seen]:
            del self._next_due[key]
        return due

    async def _one(
        self, bucket: int, member: RetentionMember, slots: asyncio.Semaphore, summary: RetentionPass
    ) -> None:
        async with slots:
            key = (member.scope, member.name)
            outcome = await self._with_retries(bucket, member)
            if outcome is None:
                summary.failed += 1
            elif outcome.fenced:
                summary.fenced += 1
                self._next_due.pop(key, None)
                return
            else:
                summary.recorded += outcome.recorded is not None
                summary.truncations += outcome.truncation is TruncationStart.STARTED
                if outcome.truncation is TruncationStart.STARTED:
                    _TRUNCATIONS.inc()
                summary.purged += outcome.purged_up_to is not None
            if key in self._next_due:
                self._next_due[key] = self._clock.now_ms() + self._period_ms

    async def _with_retries(self, bucket: int, member: RetentionMember) -> CycleOutcome | None:
        """The cycle's outcome, or None when every attempt failed."""
        delay = self._retry_delay_s
        for attempt in range(1, self._attempts + 1):
            fence = self._fence_for(bucket)
            if fence is None:
                return CycleOutcome(fenced=True)
            try:
                return await self._service.run_cycle(member.scope, member.name, fence)
            except DomainError as exc:
                if attempt == self._attempts:
                    log.warning(
                        "retention of %s/%s failed %d times, trying again next period: %s",
                        member.scope,
                        member.name,
                        attempt,
                        exc,
                    )
                    return None
            except Exception:
                # A bug in one stream's cycle must not stop retention of all the others.
                log.exception("retention of %s/%s failed unexpectedly", member.scope, member.name)
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_retry_delay_s)
        return None
