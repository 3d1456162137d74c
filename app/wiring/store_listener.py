"""The HTTP listener of `pgcontroller segment-store` (metrics and health probes), on the store's own
host at --segment-store-metrics-port, over TLS when the store's port is.

Invariant: the listener reports the store it runs beside: readiness true only while the store
serves (false while it starts and from the moment shutdown begins), liveness false once one of the
store's background tasks died."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from aiohttp import web

from app.api.rest.store_app import store_app
from app.clock import SystemClock
from app.services.health import HealthService, HealthStatus
from app.settings import Settings
from app.waiting import bounded
from app.wiring.http_listener import listen_http
from app.wiring.segment_store import RunningStore

SEGMENT_STORE = "segment-store"


@dataclass(frozen=True)
class MetricsListener:
    runner: web.AppRunner
    port: int

    async def close(self, timeout_s: float) -> None:
        # A scrape in flight is a quick render: the bound only guards against a stuck peer.
        with contextlib.suppress(TimeoutError):
            await bounded(self.runner.cleanup(), limit_s=timeout_s)


def store_health() -> HealthService:
    """The store process's health: no contributor until the store runs (readiness false, liveness
    true while it starts)."""
    return HealthService(SystemClock(), name=SEGMENT_STORE)


def watch_store(health: HealthService, store: RunningStore) -> None:
    """The running store as the one contributor, read from the store at each probe."""

    def check() -> tuple[HealthStatus, dict[str, str]]:
        died = store.died()
        if died is not None:
            # The process exits on its own within a moment; FAILED makes liveness false meanwhile.
            return HealthStatus.FAILED, {"error": type(died).__name__}
        return HealthStatus.UP, {"port": str(store.address[1]), **store.tier_health()}

    health.register(SEGMENT_STORE, check)


async def start_metrics_listener(settings: Settings, health: HealthService) -> MetricsListener | None:
    """Listening, or None with --no-metrics. Raises OSError when the port cannot be bound."""
    if settings.no_metrics:
        return None
    runner, port = await listen_http(
        store_app(health), settings, settings.segment_store_host, settings.segment_store_metrics_port
    )
    return MetricsListener(runner, port)
