"""The gRPC health-checking service (grpc.health.v1.Health) on the controller's gRPC port,
answering from the process's readiness. Open without credentials: it sits outside the
ControllerService, whose handlers are the only ones the guard runs in.
"""

from __future__ import annotations

import asyncio
import contextlib

from grpclib.health.check import CheckBase
from grpclib.health.service import Health

from app.services.health import HealthService

# How often a Watch re-reads readiness; its answers are sent only on a change.
WATCH_INTERVAL_S = 0.2


class ReadinessCheck(CheckBase):
    """SERVING exactly when the process is ready. Unlike grpclib's ServiceCheck it caches nothing
    (readiness is a cheap read) and logs nothing (a drain is not a warning)."""

    def __init__(self, health: HealthService, interval_s: float = WATCH_INTERVAL_S) -> None:
        self._health = health
        self._interval_s = interval_s
        self._events: set[asyncio.Event] = set()
        self._poll: asyncio.Task[None] | None = None
        self._last: bool | None = None

    def __status__(self) -> bool | None:
        return self._health.ready

    async def __check__(self) -> bool | None:
        return self._health.ready

    async def __subscribe__(self) -> asyncio.Event:
        if self._poll is None:
            self._last = self._health.ready
            self._poll = asyncio.create_task(self._watch(), name="grpc-health-watch")
        event = asyncio.Event()
        self._events.add(event)
        return event

    async def __unsubscribe__(self, event: asyncio.Event) -> None:
        self._events.discard(event)
        if not self._events and self._poll is not None:
            poll, self._poll = self._poll, None
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poll

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            now = self._health.ready
            if now != self._last:
                self._last = now
                for event in self._events:
                    event.set()


def health_service(health: HealthService, *services: object) -> Health:
    """Answers for the overall server ("") and for each of `services` by its gRPC name."""
    check = ReadinessCheck(health)
    return Health({service: [check] for service in services})  # type: ignore[misc]
