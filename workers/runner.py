"""Runs one durable request to completion, at least once, never losing it.

Order of events for one attempt: wait until the row is due; honour the fairness barrier (a
stream whose other processor is waiting postpones requests that have not started); run the
handler; then acknowledge (delete the row). A handler that cannot get its state transition
(OperationNotAllowed) records this processor as the stream's waiting one and is postponed;
a transient failure (lost race, database or connection trouble) is recorded on the row and
retried with backoff. A final failure (one re-running cannot fix, or an unexpected error that
kept failing `max_failures` times) is rolled back by the handler (the stream's state restored)
and the row parked, fenced like an acknowledgement: it leaves its stream's queue, so the
stream's later requests run, until an operator retries or drops it. Every step of a handler,
its rollback included, is idempotent, so re-running after a crash or an error is safe.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from app.domain.cluster import Fence
from app.domain.errors import (
    FinalFailure,
    InvalidInput,
    NotFound,
    OperationNotAllowed,
    StoreUnavailable,
    WriteConflict,
)
from app.domain.requests import Processor, Request, RequestKind
from app.metrics.registry import histogram
from app.observability.context import bound
from app.ports import Clock, RequestQueue
from workers.keyed import RetryLater

log = logging.getLogger("pgcontroller.requests")
_STEPS = histogram("pgcontroller_workflow_step_duration_seconds")

MarkStarted = Callable[[], Awaitable[None]]
# Whether a request's work is under way although its row was never marked started (Pravega's
# hasTaskStarted): such a request is not held back by the fairness barrier.
StartedCheck = Callable[[Request], Awaitable[bool]]


class RequestHandler(Protocol):
    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        """Runs the request's workflow to its end; every step idempotent. Raises
        OperationNotAllowed when the stream's state does not allow it *yet*."""
        ...


@runtime_checkable
class RollsBack(Protocol):
    async def rollback(self, request: Request) -> None:
        """Restores what the request's workflow changed that would block the stream (its working
        state, a pending transition, an "updating" flag) before the request is parked. Must be
        idempotent: a crash before the park runs the request (and maybe this) again."""
        ...


# Failures that pass by themselves: retried for as long as they last, never parked.
_TRANSIENT: tuple[type[Exception], ...] = (WriteConflict, StoreUnavailable, OSError, TimeoutError)
# Failures that running the same request again cannot fix: parked at once. A step's invalid
# input includes a segment store refusing the operation (a truncation past a segment's end).
_FINAL: tuple[type[Exception], ...] = (FinalFailure, InvalidInput)


class _UnknownKind(Exception):
    """A kind this process has no handler for; kept for a process that has (never parked)."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


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
        max_failures: int,
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
        self._max_failures = max_failures

    async def attempt(self, request: Request) -> RetryLater[Request] | None:
        """One attempt; RetryLater to be called again with the (updated) request, None when
        the request is finished here (acknowledged, or no longer ours to run)."""
        # Everything the attempt logs, and every request it enqueues, carries the id of the call
        # that enqueued this one, and its stream.
        with bound(request=request.trace_id, scope_name=request.scope, stream_name=request.stream or None):
            return await self._attempt(request)

    async def _attempt(self, request: Request) -> RetryLater[Request] | None:
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
                raise _UnknownKind(f"this process has no handler for {request.kind.value} requests")
            log.debug("request %d (%s %s): running its workflow", request.id, request.kind.value, request.key)
            await self._timed(handler, request, mark_started)
        except OperationNotAllowed as exc:
            return await self._on_not_allowed(current, exc)
        except NotFound as exc:
            # The stream or scope the request is about is gone: nothing is left to do.
            log.info("request %d (%s %s): %s; dropping it", request.id, request.kind.value, request.key, exc)
        except _UnknownKind as exc:
            return await self._postponed(current, str(exc), True)  # not counted: never parked
        except _FINAL as exc:
            return await self._park(current, exc)
        except Exception as exc:
            if not isinstance(exc, _TRANSIENT) and current.failures + 1 >= self._max_failures:
                return await self._park(current, exc)
            return await self._on_failure(current, exc)
        return await self._finish(current)

    async def _timed(self, handler: RequestHandler, request: Request, mark_started: MarkStarted) -> None:
        """The handler's step, timed by processor, request kind and how it ended."""
        start = time.perf_counter()
        result = "failed"
        try:
            await handler.handle(request, mark_started)
            result = "done"
        except OperationNotAllowed:
            result = "postponed"
            raise
        finally:
            _STEPS.labels(self._processor.value, request.kind.value, result).observe(
                time.perf_counter() - start
            )

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
        # Only unexpected failures count towards parking; transient ones are retried for ever.
        return await self._postponed(request, _describe(exc), True, counted=not isinstance(exc, _TRANSIENT))

    async def _park(self, request: Request, exc: Exception) -> RetryLater[Request] | None:
        """Rolls the workflow back, then parks the row. A crash (or a failed store call) between
        the two leaves the row queued: its next run finds the intent gone and finishes as a no-op."""
        error = _describe(exc)
        handler = self._handlers.get(request.kind)
        fence = None
        if self._fence_for is not None:
            fence = self._fence_for(request.bucket)
            if fence is None:
                return None  # no longer ours: the new owner runs it again, and parks it
        try:
            if isinstance(handler, RollsBack):
                await handler.rollback(request)
            if self._barrier and request.stream:
                await self._queue.clear_waiting_processor(request.scope, request.stream, self._processor)
            # A bucket lost during the rollback: the fence makes this park land nothing.
            parked = await self._queue.park(request.id, error, self._clock.now_ms(), fence)
        except NotFound:
            # The stream went meanwhile: nothing is left to restore or to park.
            return await self._finish(request)
        except _TRANSIENT as store_exc:
            return await self._on_failure(request, store_exc)
        if parked:
            log.error(
                "request %d (%s %s) failed finally and is parked (its stream's state is restored; "
                "an operator may retry or drop it): %s",
                request.id,
                request.kind.value,
                request.key,
                error,
            )
        return None

    async def _postponed(
        self, request: Request, reason: str, failed: bool, *, counted: bool = False
    ) -> RetryLater[Request] | None:
        first, cap = self._retry if failed else self._postpone
        delay_s = _backoff(request.attempts, first, cap)
        try:
            updated = await self._queue.postpone(
                request, self._clock.now_ms() + int(delay_s * 1000), reason, failed=counted
            )
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
