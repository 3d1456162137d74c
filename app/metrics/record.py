"""Recording at the place an event happens: `operation` wraps a service coroutine into Pravega's
triple (success counter, failure counter, latency of successes); a call is a success when its
outcome says so, a failure when it answers a failing outcome or raises.

Invariant: the metric objects are looked up once, when the wrapper is made, so a call costs two
clock reads and one increment, no dictionary look-ups or allocations of label children."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from app.metrics.registry import counter, histogram

P = ParamSpec("P")
R = TypeVar("R")
_P = "pravega_controller_"


def _always(_: Any) -> bool:
    return True


def operation(
    noun: str, done: str, fail: str, succeeded: Callable[[Any], bool] = _always
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Counts `pravega_controller_<noun>_<done>_total` (and its latency) when `succeeded(outcome)`,
    `..._<fail>_total` otherwise or when the call raises."""
    ok = counter(f"{_P}{noun}_{done}")
    latency = histogram(f"{_P}{noun}_{done}_latency_seconds")

    def took(seconds: float) -> None:
        ok.inc()
        latency.observe(seconds)

    return _recorded(succeeded, counter(f"{_P}{noun}_{fail}").inc, took)


def failures(
    name: str, succeeded: Callable[[Any], bool] = _always
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Counts `name` when the call answers a failing outcome or raises (a metric Pravega keeps
    without a success counter or latency of its own, e.g. scope.recursive_delete_failed)."""
    return _recorded(succeeded, counter(name).inc, None)


def latency(
    name: str, succeeded: Callable[[Any], bool] = _always
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Observes histogram `name` (seconds) for the calls whose outcome `succeeded` accepts: a
    latency Pravega keeps without counters of its own (e.g. transactions.committing_latency_ms)."""
    return _recorded(succeeded, None, histogram(name).observe)


def _recorded(
    succeeded: Callable[[Any], bool],
    failed: Callable[[], None] | None,
    took: Callable[[float], None] | None,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """The wrapper of all three: `took(seconds)` after a call whose outcome `succeeded` accepts,
    `failed()` after one it refuses or that raised."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def measured(*args: P.args, **kwargs: P.kwargs) -> R:
            start = time.perf_counter()
            try:
                outcome = await fn(*args, **kwargs)
            except Exception:
                # A cancelled call (shutdown, client gone) is not a failure of the operation.
                if failed is not None:
                    failed()
                raise
            if succeeded(outcome):
                if took is not None:
                    took(time.perf_counter() - start)
            elif failed is not None:
                failed()
            return outcome

        return measured

    return wrap


class Stopwatch:
    """A latency of one step inside a larger call (the segment-store part of a transaction's
    create, commit or abort): `start = stopwatch.start()` before, `stopwatch.done(start)` after
    the step succeeded, so a failed step records nothing, as Pravega's `thenRun` does."""

    def __init__(self, name: str) -> None:
        self._histogram = histogram(name)

    @staticmethod
    def start() -> float:
        return time.perf_counter()

    def done(self, start: float) -> None:
        self._histogram.observe(time.perf_counter() - start)


def outcome_is(*wanted: object) -> Callable[[Any], bool]:
    """A success test for services answering an outcome enum."""
    return lambda outcome: outcome in wanted


def status_is(*wanted: object) -> Callable[[Any], bool]:
    """A success test for outcomes carrying `.status`."""
    return lambda outcome: getattr(outcome, "status", None) in wanted


class StoreTraffic:
    """One segment store's data-plane counters (appends, bytes, reads), their label children made
    once per store, so an append costs two increments."""

    def __init__(self, store: str) -> None:
        self._appends = counter("pgcontroller_segmentstore_appends").labels(store)
        self._append_bytes = counter("pgcontroller_segmentstore_append_bytes").labels(store)
        self._reads = counter("pgcontroller_segmentstore_reads").labels(store)
        self._read_bytes = counter("pgcontroller_segmentstore_read_bytes").labels(store)
        self._db_reads = counter("pgcontroller_segmentstore_db_reads").labels(store)
        self._cached_reads = counter("pgcontroller_segmentstore_cached_reads").labels(store)
        self._read_ahead_reads = counter("pgcontroller_segmentstore_read_ahead_reads").labels(store)

    def appended(self, events: int, size: int) -> None:
        self._appends.inc(events)
        self._append_bytes.inc(size)

    def read(self, size: int) -> None:
        self._reads.inc()
        self._read_bytes.inc(size)

    def db_read(self) -> None:
        self._db_reads.inc()

    def cached_read(self) -> None:
        self._cached_reads.inc()

    def read_ahead_read(self) -> None:
        self._read_ahead_reads.inc()
