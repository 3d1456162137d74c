"""Process health as Pravega's /health endpoints report it: liveness, readiness, details.

Readiness follows the metadata store: a probe loop marks the process not ready while
PostgreSQL cannot be reached and ready again once it can, so the loop survives restarts.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.domain.errors import StoreUnavailable
from app.ports import Clock

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


class HealthService:
    """Aggregates contributors; the controller is UP when every contributor is UP."""

    def __init__(self, clock: Clock, name: str = "pgcontroller") -> None:
        self.name = name
        self._clock = clock
        self._contributors: dict[str, ContributorHealth] = {}
        self._alive = True

    def contributor(self, name: str) -> ContributorHealth:
        return self._contributors.setdefault(name, ContributorHealth(name))

    def set(self, name: str, status: HealthStatus, **details: str) -> None:
        entry = self.contributor(name)
        entry.status = status
        entry.details = dict(details)

    def contributors(self) -> dict[str, ContributorHealth]:
        return dict(self._contributors)

    @property
    def status(self) -> HealthStatus:
        statuses = {c.status for c in self._contributors.values()}
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
        return self.status == HealthStatus.UP

    @property
    def alive(self) -> bool:
        return self._alive and self.status != HealthStatus.FAILED

    def mark_dead(self) -> None:
        self._alive = False


async def probe_metadata_store(
    health: HealthService,
    ping: Callable[[], Awaitable[None]],
    clock: Clock,
    interval_s: float = 2.0,
) -> None:
    """Runs until cancelled. Store outages are reported, never raised: the loop outlives them."""
    while True:
        try:
            await asyncio.wait_for(ping(), timeout=max(interval_s, 1.0))
        except (StoreUnavailable, TimeoutError) as exc:
            if health.contributor("metadata-store").status != HealthStatus.DOWN:
                log.warning("metadata store unreachable: %s", exc)
            health.set("metadata-store", HealthStatus.DOWN, error=str(exc))
        else:
            health.set("metadata-store", HealthStatus.UP, checked_at=str(clock.now_ms()))
        await asyncio.sleep(interval_s)
