"""The limits on password checks, so that guessing cannot take the service's CPU or delay anyone
else's login. An Argon2id check costs about 0.1 s of a core and 64 MiB; a credential already
verified is answered from the cache and never comes here.

A check is admitted only while all of these hold, and refused at once otherwise (TooManyAttempts:
never queued, so a flood is turned away in microseconds):
- its source has fewer than `per_source` checks running or waiting;
- its source's bucket of failures has a token, and so has the process's (a check takes one, a
  success gives it back: only wrong passwords and unknown names spend them);
- a check slot is free, or fewer than `queue` checks are waiting for one.

One address runs at most one check at a time (its second waits), so while one address guesses
another's login finds a slot at once. The checks of an address that failed of late (its bucket
not full) run on threads of a lower CPU priority (SUSPECT_NICENESS): they take only the CPU that
serving and other addresses' logins leave.

Invariant: at most `concurrency` checks run at once and at most `queue` wait; the per-source
table holds at most `max_sources` addresses (the least recently seen is forgotten first).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)
R = TypeVar("R")

# IPv6 hosts are usually handed a whole /64: a source is its network, or one host could take
# a fresh bucket per address.
_IPV6_SOURCE_PREFIX = 64
# The niceness of the threads checking for an address that failed of late: Argon2id's four lanes
# each want a core, and at the serving thread's priority one guess in progress halves what serving
# (and a real client's first login) gets of a two-core machine.
SUSPECT_NICENESS = 15


class TooManyAttempts(Exception):
    """Refused before any check: too many checks at once or failures of late. The message is
    safe to send; `retry_after_s` is when a token is due (0 when slots, not tokens, ran out)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class GuessLimits:
    concurrency: int = 2
    queue: int = 8
    per_source: int = 2
    source_failures_per_s: float = 0.2
    source_failure_burst: int = 20
    failures_per_s: float = 5.0
    failure_burst: int = 40
    max_sources: int = 10_000


def source_of(address: str | None) -> str:
    """The key a caller's address is limited under: the IPv4 address, an IPv6 address's /64
    (an IPv4-mapped one as IPv4), or the text as given when it is no IP address."""
    if not address:
        return ""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, _IPV6_SOURCE_PREFIX), strict=False))
    return str(ip)


class _Bucket:
    """A token bucket: `rate` tokens a second, at most `burst` kept."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.stamp = float(burst), now

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_s(self) -> float:
        """Seconds until a token is due (0 when one is there)."""
        return max(0.0, (1.0 - self.tokens) / self.rate)


class Ticket:
    """One admitted check; `succeeded()` gives back the failure tokens it took. `suspect`: its
    address had failed of late when it was admitted."""

    __slots__ = ("_buckets", "suspect")

    def __init__(self, buckets: tuple[_Bucket, ...], suspect: bool) -> None:
        self._buckets = buckets
        self.suspect = suspect

    def succeeded(self) -> None:
        for bucket in self._buckets:
            bucket.tokens = min(bucket.burst, bucket.tokens + 1.0)
        self._buckets = ()


class CheckGate:
    """Admits password checks within GuessLimits (module docstring) and runs them on its own
    threads, at a lower CPU priority than the serving thread: a check in progress takes the CPU
    only when serving does not need it."""

    def __init__(self, limits: GuessLimits, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._limits = limits
        self._monotonic = monotonic
        self._running: dict[str, int] = {}  # the one check each address runs
        self._waiters: list[tuple[str, asyncio.Future[None]]] = []
        self._pending: dict[str, int] = {}
        self._sources: OrderedDict[str, _Bucket] = OrderedDict()
        self._global = _Bucket(limits.failures_per_s, limits.failure_burst, monotonic())
        self._threads = ThreadPoolExecutor(limits.concurrency, thread_name_prefix="password-check")
        self._suspect_threads = ThreadPoolExecutor(
            limits.concurrency, thread_name_prefix="password-check-suspect", initializer=_yield_the_cpu
        )
        self.refused = 0  # counted for the figures and the tests

    async def run(self, ticket: Ticket, check: Callable[[], R]) -> R:
        """`check()` on a check thread of the ticket's priority (called inside `admitted`)."""
        threads = self._suspect_threads if ticket.suspect else self._threads
        return await asyncio.get_running_loop().run_in_executor(threads, check)

    @asynccontextmanager
    async def admitted(self, source: str) -> AsyncIterator[Ticket]:
        """Holds a check slot for the block, or raises TooManyAttempts at once."""
        limits = self._limits
        now = self._monotonic()
        bucket = self._source_bucket(source, now)
        self._global.refill(now)
        if self._pending.get(source, 0) >= limits.per_source:
            self._refuse("too many password checks in progress from this address", 0.0)
        if bucket.tokens < 1.0:
            self._refuse("too many failed logins from this address", bucket.wait_s())
        if self._global.tokens < 1.0:
            self._refuse("too many failed logins", self._global.wait_s())
        if not self._may_start(source) and len(self._waiters) >= limits.queue:
            self._refuse("too many password checks waiting", 0.0)
        suspect = bucket.tokens < bucket.burst
        bucket.tokens -= 1.0
        self._global.tokens -= 1.0
        self._pending[source] = self._pending.get(source, 0) + 1
        try:
            await self._acquire(source)
            try:
                yield Ticket((bucket, self._global), suspect)
            finally:
                self._release(source)
        finally:
            left = self._pending[source] - 1
            if left:
                self._pending[source] = left
            else:
                del self._pending[source]

    def _may_start(self, source: str) -> bool:
        """A slot is free and `source` runs no check: one address never holds two slots, so while
        a single address guesses, another's login finds a slot at once."""
        return sum(self._running.values()) < self._limits.concurrency and source not in self._running

    async def _acquire(self, source: str) -> None:
        # No waiter may start whenever this one may: each release starts every waiter it can.
        if self._may_start(source):
            self._running[source] = 1
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiters.append((source, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(source)  # granted as it was cancelled: the slot passes on
            else:
                self._waiters.remove((source, granted))
            raise

    def _release(self, source: str) -> None:
        del self._running[source]
        for waiter in list(self._waiters):
            waiter_source, granted = waiter
            if not self._may_start(waiter_source):
                continue
            self._waiters.remove(waiter)
            self._running[waiter_source] = 1
            granted.set_result(None)

    def _refuse(self, message: str, retry_after_s: float) -> None:
        self.refused += 1
        raise TooManyAttempts(f"{message}; retry in {math.ceil(retry_after_s) or 1} s", retry_after_s)

    def _source_bucket(self, source: str, now: float) -> _Bucket:
        bucket = self._sources.get(source)
        if bucket is None:
            bucket = _Bucket(self._limits.source_failures_per_s, self._limits.source_failure_burst, now)
            self._sources[source] = bucket
            self._forget_oldest()
        else:
            bucket.refill(now)
            self._sources.move_to_end(source)
        return bucket

    def _forget_oldest(self) -> None:
        """Past `max_sources`, the least recently seen go (a check still running keeps its own
        bucket through its ticket; only the memory of that source's failures is lost)."""
        while len(self._sources) > self._limits.max_sources:
            self._sources.popitem(last=False)


def _yield_the_cpu() -> None:
    """Lowers the calling thread's CPU priority for good (raising it again needs privilege);
    Argon2id's lane threads, started from it, inherit it. Linux only: elsewhere PRIO_PROCESS with
    a thread id would renice the whole process."""
    if sys.platform != "linux":
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SUSPECT_NICENESS)
    except OSError:
        log.warning("could not lower the priority of the password-check threads")
