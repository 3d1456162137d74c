"""Feeds the requests of the buckets this process owns into per-stream serial queues.

Wakes on NOTIFY (a request was inserted) and polls anyway, so a missed notification only
delays work. Each request row is in memory at most once (tracked by id until its queue is
done with it); requests of buckets lost are dropped from memory and stay in the database
for the new owner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from app.domain.errors import StoreUnavailable
from app.domain.requests import Processor, Request
from app.ports import RequestQueue
from app.waiting import wait_event
from workers.failpoints import failpoint
from workers.keyed import KeyedQueues
from workers.runner import RequestRunner

log = logging.getLogger("pgcontroller.dispatcher")


def _request_key(request: Request) -> str:
    return request.key


class RequestDispatcher:
    def __init__(
        self,
        queue: RequestQueue,
        runner: RequestRunner,
        owned_buckets: Callable[[], frozenset[int]],
        *,
        processor: Processor = Processor.REQUESTS,
        key: Callable[[Request], str] = _request_key,
        one_per_key: bool = False,
        ceiling: int,
        poll_s: float,
        batch: int = 500,
        idle_s: float = 5.0,
    ) -> None:
        self._queue = queue
        self._owned = owned_buckets
        self._processor = processor
        self._key = key
        # With one_per_key, a key's later requests stay in the database (not in memory) while
        # one of its requests is queued or running: for processors whose run covers them.
        self._one_per_key = one_per_key
        # A notification names the request's stream (Request.key): it tells which of our keys it
        # is only when requests are keyed by their stream.
        self._skips_keys_in_hand = one_per_key and key is _request_key
        self._keys_in_memory: dict[str, int] = {}
        # The bucket each queued key's requests were filed under, so losing a bucket can cancel
        # exactly its keys; one entry per stream seen, emptied whenever buckets are lost.
        self._key_buckets: dict[str, int] = {}
        self._poll_s = poll_s
        self._batch = batch
        self._in_flight: set[int] = set()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._queues: KeyedQueues[str, Request] = KeyedQueues(
            runner.attempt, ceiling=ceiling, idle_s=idle_s, on_done=self._done
        )

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def wake(self, payload: str = "") -> None:
        """NOTIFY callback; `payload` is "processor:bucket:scope/stream" (migration 0024;
        "processor:bucket" before it), ignored if not ours."""
        if not payload:
            self._wake.set()
            return
        processor, _, rest = payload.partition(":")
        if processor != self._processor.value:
            return
        _bucket, _, key = rest.partition(":")
        # That key's request in hand covers what is pending on it, and when it is done the queue
        # is read again (`_done`): a read now would find nothing to start.
        if self._skips_keys_in_hand and key and key in self._keys_in_memory:
            return
        self._wake.set()

    def buckets_lost(self, buckets: frozenset[int]) -> None:
        def lost(key: str) -> bool:
            return self._key_buckets.get(key) in buckets

        self._queues.cancel_where(lost)
        # Forget them all: a request still owned will simply be read again.
        self._in_flight.clear()
        self._keys_in_memory.clear()
        self._key_buckets.clear()

    def _done(self, request: Request) -> None:
        self._in_flight.discard(request.id)
        key = self._key(request)
        left = self._keys_in_memory.get(key, 0) - 1
        if left > 0:
            self._keys_in_memory[key] = left
        else:
            self._keys_in_memory.pop(key, None)
            if self._one_per_key:
                self._wake.set()  # the key's next request may be waiting in the database

    async def run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            await failpoint("dispatcher.loop")
            fetched, submitted = await self._dispatch_once()
            if fetched >= self._batch and submitted:
                continue  # more may be waiting beyond this batch
            await wait_event(self._wake, self._poll_s)

    async def _dispatch_once(self) -> tuple[int, int]:
        """(rows read, requests newly put in memory)."""
        buckets = self._owned()
        if not buckets:
            return 0, 0
        try:
            pending = await self._queue.pending(
                self._processor,
                sorted(buckets),
                sorted(self._in_flight),
                self._batch,
                first_per_key=self._one_per_key,
            )
        except StoreUnavailable as exc:
            log.warning("cannot read pending requests: %s", exc)
            return 0, 0
        if self._stopping.is_set():
            return 0, 0  # stopped while reading: the queues take no more work
        submitted = 0
        for request in pending:
            if request.id in self._in_flight or request.bucket not in buckets:
                continue
            key = self._key(request)
            if self._one_per_key and key in self._keys_in_memory:
                continue
            self._in_flight.add(request.id)
            self._key_buckets[key] = request.bucket
            self._keys_in_memory[key] = self._keys_in_memory.get(key, 0) + 1
            self._queues.submit(key, request)
            submitted += 1
        return len(pending), submitted

    async def stop(self, timeout_s: float) -> None:
        """Stop intake, let running requests finish within the timeout, cancel the rest."""
        self._stopping.set()
        self._wake.set()
        await self._queues.shutdown(timeout_s)
