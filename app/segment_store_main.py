"""Composition root of `pgcontroller segment-store`: a segment store without the controller.

It serves Pravega's wire protocol over the cluster's PostgreSQL, registers its address, heartbeats,
and serves only the containers of the cluster's container map that name it, until SIGTERM/SIGINT
(then it deregisters, so its containers move at once). Any number of them share one database. Its
metrics and health probes are on an HTTP listener of its own (app/wiring/store_listener.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from dataclasses import replace
from pathlib import Path

from app.clock import SystemClock
from app.domain.errors import IllegalState, StoreUnavailable
from app.embedded_pg import EmbeddedPostgres
from app.services.health import HealthService
from app.settings import Settings
from app.store.cluster import PgClusterStore
from app.store.db import Database
from app.store.migrate import ensure_schema
from app.store.pool import create_pool
from app.waiting import bounded, wait_event
from app.wiring.segment_store import RunningStore, embedded_store_address, start_segment_store
from app.wiring.shutdown_watchdog import ShutdownWatchdog, shutdown_budget_s
from app.wiring.store_listener import MetricsListener, start_metrics_listener, store_health, watch_store

log = logging.getLogger("pgcontroller.segment-store")

EXIT_FAILED = 1
# How often the main task looks for a background task of the store that died.
_WATCH_S = 0.5


async def serve_segment_store(settings: Settings) -> int:
    """Serves until SIGTERM/SIGINT and returns 0; 1 when it cannot start or a loop died."""
    url = settings.db_url
    if url is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        if not embedded.is_running():
            log.error("no database: give --db-url, or start one with `pgcontroller db start`")
            return EXIT_FAILED
        url = embedded.url()
    await ensure_schema(url)
    pool = await create_pool(url, max_size=settings.pool_max_size)
    # No drain window: readiness turns false at SIGTERM, but a store's clients do not wait for a
    # balancer; they reconnect to whichever store getURI names next.
    watchdog = ShutdownWatchdog(shutdown_budget_s(0.0, settings.shutdown_timeout_s))
    try:
        try:
            cluster = await PgClusterStore(pool).get_settings()
        except (IllegalState, StoreUnavailable) as exc:
            log.error("cannot read the cluster's settings: %s", exc)
            return EXIT_FAILED
        # The container count is the cluster's, fixed for its life: never this process's default.
        settings = replace(settings, container_count=cluster.container_count)
        return await _with_listener(settings, pool, url, watchdog)
    finally:
        with contextlib.suppress(Exception):
            await bounded(pool.close(), limit_s=settings.shutdown_timeout_s / 2)
        watchdog.disarm()


async def _with_listener(settings: Settings, pool: Database, url: str, watchdog: ShutdownWatchdog) -> int:
    """The metrics listener is bound before the store starts: a port already taken stops the
    process before it registers (a store that joined and left at once would move containers for
    nothing). It closes after the store, so a last scrape still reads the final counts."""
    health = store_health()
    try:
        metrics = await start_metrics_listener(settings, health)
    except OSError as exc:
        log.error(
            "cannot listen for metrics on %s:%d (--segment-store-metrics-port, or --no-metrics): %s",
            settings.segment_store_host,
            settings.segment_store_metrics_port,
            exc.strerror or exc,
        )
        return EXIT_FAILED
    try:
        return await _with_store(settings, pool, url, watchdog, health, metrics)
    finally:
        watchdog.arm()
        if metrics is not None:
            await metrics.close(settings.shutdown_timeout_s / 2)


async def _with_store(
    settings: Settings,
    pool: Database,
    url: str,
    watchdog: ShutdownWatchdog,
    health: HealthService,
    metrics: MetricsListener | None,
) -> int:
    try:
        store = await start_segment_store(settings, pool, SystemClock(), url, settings.segment_store_hosts)
    except ValueError as exc:
        log.error("%s", exc)
        return EXIT_FAILED
    try:
        watch_store(health, store)
        address = embedded_store_address(settings, store.server)
        log.info(
            "segment store %s:%d ready (%d containers in the cluster); %s",
            address.host,
            address.port,
            settings.container_count,
            "no metrics listener" if metrics is None else f"metrics and probes on port {metrics.port}",
        )
        if settings.ready_file is not None:
            _write_ready_file(settings.ready_file, store, metrics)
        return await _until_stopped(store)
    finally:
        watchdog.arm()
        # Readiness answers false while the store deregisters and closes.
        health.drain()
        await store.close()


async def _until_stopped(store: RunningStore) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set():
            await wait_event(stop, _WATCH_S)
            failure = store.died()
            if failure is not None:
                log.error("segment store loop died: %r", failure)
                return EXIT_FAILED
        log.info("shutdown requested")
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _write_ready_file(path: Path, store: RunningStore, metrics: MetricsListener | None) -> None:
    ready = {"segment_store_port": store.address[1], "pid": os.getpid()}
    if metrics is not None:
        ready["metrics_port"] = metrics.port
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(ready) + "\n")
    os.replace(tmp, path)
