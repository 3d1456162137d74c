"""Runs one durable request to completion, at least once, never losing it.

Order of events for one attempt: wait until the row is due; honour the fairness barrier (a
stream whose other processor is waiting postpones requests that have not started); run the
handler; then acknowledge (delete the row). A handler that cannot get its state transition
(OperationNotAllowed) records this processor as the stream's waiting one and is postponed;
any other failure is recorded on the row and retried with backoff. Every step of a handler
is idempotent, so re-running after a crash or an error is safe.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from app.domain.cluster import Fence
from app.domain.errors import NotFound, OperationNotAllowed, StoreUnavailable, WriteConflict
from app.domain.requests import Processor, Request, RequestKind
from app.ports import Clock, RequestQueue
from workers.keyed import RetryLater

log = logging.getLogger("pgcontroller.requests")

MarkStarted = Callable[[], Awaitable[None]]
# Whether a request's work is under way although its row was never marked started (Pravega's
# hasTaskStarted): such a request is not held back by the fairness barrier.
StartedCheck = Callable[[Request], Awaitable[bool]]


class RequestHandler(Protocol):
    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        """Runs the request's workflow to its end; every step idempotent. Raises
        OperationNotAllowed when the stream's state does not allow it *yet*."""
        ...


def _backoff(attempts: int, first_s: float, cap_s: float) -> float:
    return min(cap_s, first_s * float(2 ** min(attempts, 16)))


class RequestRunner:
    def __init__(
        self,
        queue: RequestQueue,
        handlers: Mapping[RequestKind, RequestHandler],
        clock: Clock,
        *,
        processor: Processor = Processor.REQUESTS,
        owns: Callable[[int], bool] = lambda _bucket: True,
        fence_for: Callable[[int], Fence | None] | None = None,
        barrier: bool = True,
        started_check: StartedCheck | None = None,
        postpone_first_s: float = 0.05,
        postpone_cap_s: float = 1.0,
        retry_first_s: float = 0.1,
        retry_cap_s: float = 10.0,
    ) -> None:
        self._queue = queue
        self._handlers = handlers
        self._clock = clock
        self._processor = processor
        self._owns = owns
        # With fencing, the acknowledgement lands only under the generation this process
        # claimed the bucket with; a late ack after a takeover leaves the row to the new owner.
        self._fence_for = fence_for
        self._barrier = barrier
        self._started_check = started_check
        self._postpone = (postpone_first_s, postpone_cap_s)
        self._retry = (retry_first_s, retry_cap_s)

    async def attempt(self, request: Request) -> RetryLater[Request] | None:
        """One attempt; RetryLater to be called again with the (updated) request, None when
        the request is finished here (acknowledged, or no longer ours to run)."""
        if not self._owns(request.bucket):
            return None
        wait_ms = request.not_before - self._clock.now_ms()
        if wait_ms > 0:
            return RetryLater(request, wait_ms / 1000)
        current = request
        try:
            if (
                self._barrier
                and request.stream
                and not request.started
                and await self._barrier_blocks(request)
            ):
                return await self._postponed(request, "another processor is waiting on this stream", False)

            async def mark_started() -> None:
                nonlocal current
                current = await self._queue.mark_started(current)

            handler = self._handlers.get(request.kind)
            if handler is None:
                # A kind this process does not know (e.g. written by a newer version): keep it
                # queued, with the reason on its row, for a process that does.
                raise LookupError(f"this process has no handler for {request.kind.value} requests")
            await handler.handle(request, mark_started)
        except OperationNotAllowed as exc:
            return await self._on_not_allowed(current, exc)
        except NotFound as exc:
            # The stream or scope the request is about is gone: nothing is left to do.
            log.info("request %d (%s %s): %s; dropping it", request.id, request.kind.value, request.key, exc)
        except Exception as exc:
            return await self._on_failure(current, exc)
        return await self._finish(current)

    async def _barrier_blocks(self, request: Request) -> bool:
        waiting = await self._queue.get_waiting_processor(request.scope, request.stream)
        if waiting is None or waiting.value == self._processor.value:
            return False
        return self._started_check is None or not await self._started_check(request)

    async def _on_not_allowed(self, request: Request, exc: OperationNotAllowed) -> RetryLater[Request] | None:
        if not self._barrier:
            return await self._postponed(request, f"postponed: {exc}", False)
        try:
            await self._queue.set_waiting_processor(request.scope, request.stream, self._processor)
        except (StoreUnavailable, WriteConflict) as store_exc:
            return await self._on_failure(request, store_exc)
        return await self._postponed(request, f"postponed: {exc}", False)

    async def _on_failure(self, request: Request, exc: Exception) -> RetryLater[Request] | None:
        if isinstance(exc, WriteConflict | StoreUnavailable):
            log.info(
                "request %d (%s %s) will be retried: %s", request.id, request.kind.value, request.key, exc
            )
        else:
            log.warning(
                "request %d (%s %s) failed; it stays queued and will be retried",
                request.id,
                request.kind.value,
                request.key,
                exc_info=exc,
            )
        return await self._postponed(request, f"{type(exc).__name__}: {exc}", True)

    async def _postponed(self, request: Request, reason: str, failed: bool) -> RetryLater[Request] | None:
        first, cap = self._retry if failed else self._postpone
        delay_s = _backoff(request.attempts, first, cap)
        try:
            updated = await self._queue.postpone(request, self._clock.now_ms() + int(delay_s * 1000), reason)
        except WriteConflict:
            fresh = await self._fresh(request)
            return None if fresh is None else RetryLater(fresh, 0)
        except StoreUnavailable:
            # Cannot even record it: keep it in memory, the row is still in the database.
            return RetryLater(request, delay_s)
        return RetryLater(updated, delay_s)

    async def _fresh(self, request: Request) -> Request | None:
        try:
            return await self._queue.get(request.id)
        except StoreUnavailable:
            return request

    async def _finish(self, request: Request) -> RetryLater[Request] | None:
        try:
            if self._barrier and request.stream:
                await self._queue.clear_waiting_processor(request.scope, request.stream, self._processor)
            if self._fence_for is None:
                await self._queue.ack(request.id)
            else:
                fence = self._fence_for(request.bucket)
                if fence is None:
                    return None  # no longer ours: the new owner runs it again, idempotently
                await self._queue.ack(request.id, fence)
        except (StoreUnavailable, WriteConflict) as exc:
            # Completed but not acknowledged: the next attempt finds nothing left to do.
            return await self._on_failure(request, exc)
        return None
