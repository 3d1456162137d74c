"""Process health as Pravega's /health endpoints report it: liveness, readiness, details.

Contributors are pushed (`set`, as the metadata-store probe loop does) or pulled (`register`: a
check read at each query, so a verdict is never staler than the state it reads). Readiness is
every contributor UP and no drain under way: once `drain` is called it never turns true again.
An outage of the metadata store turns readiness false within PROBE_INTERVAL_S + PROBE_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.domain.errors import StoreUnavailable
from app.ports import Clock
from app.waiting import bounded, wait_event

log = logging.getLogger(__name__)


class HealthStatus(enum.Enum):
    UP = "UP"
    STARTING = "STARTING"
    NEW = "NEW"
    UNKNOWN = "UNKNOWN"
    FAILED = "FAILED"
    DOWN = "DOWN"


@dataclass
class ContributorHealth:
    name: str
    status: HealthStatus = HealthStatus.NEW
    details: dict[str, str] = field(default_factory=dict)


# A pulled contributor's check: its status now and the details that explain it.
Check = Callable[[], tuple[HealthStatus, dict[str, str]]]


class HealthService:
    """Aggregates contributors; the controller is UP when every contributor is UP."""

    def __init__(self, clock: Clock, name: str = "pgcontroller") -> None:
        self.name = name
        self._clock = clock
        self._contributors: dict[str, ContributorHealth] = {}
        self._checks: dict[str, Check] = {}
        self._alive = True
        self._draining = False

    def contributor(self, name: str) -> ContributorHealth:
        return self._contributors.setdefault(name, ContributorHealth(name))

    def set(self, name: str, status: HealthStatus, **details: str) -> None:
        entry = self.contributor(name)
        entry.status = status
        entry.details = dict(details)

    def register(self, name: str, check: Check) -> None:
        """A contributor whose status is read from `check` at each query."""
        self._checks[name] = check

    def contributors(self) -> dict[str, ContributorHealth]:
        found = dict(self._contributors)
        for name, check in self._checks.items():
            status, details = check()
            found[name] = ContributorHealth(name, status, details)
        return found

    def find(self, name: str) -> ContributorHealth | None:
        """One contributor by name, or None when there is no such contributor."""
        check = self._checks.get(name)
        if check is not None:
            status, details = check()
            return ContributorHealth(name, status, details)
        return self._contributors.get(name)

    def drain(self) -> None:
        """Shutdown has begun: readiness is false from now on, so orchestrators send no new work
        while the calls in flight finish."""
        self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def status(self) -> HealthStatus:
        statuses = {c.status for c in self.contributors().values()}
        if not statuses:
            return HealthStatus.UNKNOWN
        if statuses == {HealthStatus.UP}:
            return HealthStatus.UP
        for worst in (HealthStatus.FAILED, HealthStatus.DOWN, HealthStatus.STARTING, HealthStatus.NEW):
            if worst in statuses:
                return worst
        return HealthStatus.UNKNOWN

    @property
    def ready(self) -> bool:
        return not self._draining and self.status == HealthStatus.UP

    @property
    def alive(self) -> bool:
        return self._alive and self.status != HealthStatus.FAILED

    def mark_dead(self) -> None:
        self._alive = False


# Readiness turns false within PROBE_INTERVAL_S + PROBE_TIMEOUT_S of an outage of any kind (a
# frozen server answers nothing), and at once when the probe's session is cut (a stopped server).
PROBE_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 0.4
STORE_DOWN = "the metadata store is unavailable"


async def probe_metadata_store(
    health: HealthService,
    ping: Callable[[], Awaitable[None]],
    clock: Clock,
    interval_s: float = PROBE_INTERVAL_S,
    timeout_s: float = PROBE_TIMEOUT_S,
    lost: asyncio.Event | None = None,
) -> None:
    """Runs until cancelled. Store outages are reported, never raised: the loop outlives them.
    `lost`, when given, is set by the ping's session the moment it ends, and cuts the wait for
    the next round short."""
    wake = lost if lost is not None else asyncio.Event()
    while True:
        wake.clear()
        try:
            await bounded(ping(), limit_s=timeout_s)
        except (StoreUnavailable, TimeoutError) as exc:
            if health.contributor("metadata-store").status != HealthStatus.DOWN:
                cause = exc.__cause__ or exc
                log.warning("metadata store unreachable: %s: %s", type(cause).__name__, cause)
            # Fixed text: the contributor's details are served over REST (no host, no port).
            health.set("metadata-store", HealthStatus.DOWN, error=STORE_DOWN)
        else:
            health.set("metadata-store", HealthStatus.UP, checked_at=str(clock.now_ms()))
        await wait_event(wake, interval_s)
