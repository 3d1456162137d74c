"""Composition root: `serve` acquires the process's resources, wires its capabilities (app.wiring)
and serves gRPC and REST until SIGTERM/SIGINT.

Every resource is pushed on one AsyncExitStack as it is acquired and released in reverse, on stop
or failure: readiness turns false and the gRPC calls in flight get the drain window, then intake
stops (the servers close), then the workers get half the shutdown
budget, then the loops are cancelled, the pool is closed and the embedded PostgreSQL (if we
started it) is stopped. A background loop that dies stops the process rather than leave it
half-alive. The whole shutdown has one budget (app/wiring/shutdown_watchdog.py): a step that never
returns is reported with every stack and the process exits anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import os
import signal
import time
from pathlib import Path

from app.clock import SystemClock
from app.domain.errors import IllegalState
from app.embedded_pg import EmbeddedPostgres
from app.services.health import HealthService, HealthStatus, probe_metadata_store
from app.settings import Settings
from app.store.cluster import PgClusterStore
from app.store.db import Database
from app.store.dsn import masked
from app.store.migrate import ensure_schema
from app.store.pool import create_pool
from app.store.probe import PgProbe
from app.waiting import bounded
from app.wiring import (
    BackgroundLoops,
    Controller,
    Servers,
    grpc_extensions,
    open_resources,
    register_contributors,
    rest_extensions,
    start_embedded_segment_store,
    start_servers,
    wire,
    with_embedded_store,
)
from app.wiring.shutdown_watchdog import ShutdownWatchdog, shutdown_budget_s
from app.wiring.supervisor import supervise

# `supervise` runs `serve --processes N` (N > 1): N of these processes under one supervisor.
__all__ = ["grpc_extensions", "rest_extensions", "serve", "supervise"]

log = logging.getLogger("pgcontroller")

EXIT_LOOP_DIED = 1
EXIT_CANNOT_JOIN = 2


async def serve(settings: Settings) -> int:
    """Serves until SIGTERM/SIGINT and returns 0; 1 when a background loop died, 2 when the
    cluster in the database refuses these settings (its bucket or container counts differ)."""
    started_at = time.monotonic()
    clock = SystemClock()
    health = HealthService(clock)
    health.set("metadata-store", HealthStatus.STARTING)
    stop = asyncio.Event()
    loops = BackgroundLoops(stop)
    watchdog = ShutdownWatchdog(shutdown_budget_s(settings.shutdown_drain_s, settings.shutdown_timeout_s))
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(watchdog.disarm)  # first in, so the last step out: the budget covers every other
        url = await _database(settings, stack)
        _stop_on_signals(stop, stack)
        pool = await _pool(settings, url, stack)
        if not await _join_cluster(settings, pool):
            return EXIT_CANNOT_JOIN
        embedded_store = await start_embedded_segment_store(settings, pool, clock, url)
        if embedded_store is not None:
            stack.push_async_callback(embedded_store.close)
        settings = with_embedded_store(settings, embedded_store)
        controller = wire(settings, open_resources(settings, url, pool))
        # Closed after the workers stop (they call the stores) and before the embedded store.
        stack.push_async_callback(controller.storage.client.close)
        probe = PgProbe(url)  # closed after the loops, which use it, have stopped
        stack.push_async_callback(probe.close)
        # Pushed before the servers start, so on the way out intake stops before the workers do.
        stack.push_async_callback(_stop_loops, controller, loops, settings.shutdown_timeout_s)
        register_contributors(health, controller, loops.running, embedded_store)
        servers = await start_servers(settings, controller, health)
        stack.push_async_callback(servers.close, settings.shutdown_timeout_s)
        # Runs before the close: orchestrators see "not ready" while calls in flight finish.
        stack.push_async_callback(servers.drain, health, settings.shutdown_drain_s)
        # Start-up objects live for the whole run: keeping them out of the collector's full
        # passes cuts those pauses (tens of ms on a busy process) from every later read.
        gc.freeze()
        controller.advertise(settings.advertised_host(), servers.grpc_port, servers.rest_port)
        store_port = embedded_store.address[1] if embedded_store is not None else None
        _log_ready(settings, servers, store_port, started_at)
        if settings.ready_file is not None:
            _write_ready_file(settings.ready_file, servers, store_port)
        loops.start(
            "metadata-store-probe",
            functools.partial(probe_metadata_store, health, probe.ping, clock, lost=probe.lost),
        )
        for name, loop in controller.loops().items():
            loops.start(name, loop)
        await stop.wait()
        if not loops.died:
            log.info("shutdown requested")
        watchdog.arm()
    return EXIT_LOOP_DIED if loops.died else 0


async def _database(settings: Settings, stack: contextlib.AsyncExitStack) -> str:
    """The database URL: settings.db_url, or the embedded PostgreSQL's, started if need be."""
    if settings.db_url is not None:
        return settings.db_url
    embedded = EmbeddedPostgres(settings.data_dir)
    if await asyncio.to_thread(embedded.start):
        stack.push_async_callback(asyncio.to_thread, embedded.stop)
    # Otherwise someone else (`pgcontroller db start`) owns it; we must not stop it on exit.
    return embedded.url()


def _stop_on_signals(stop: asyncio.Event, stack: contextlib.AsyncExitStack) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
        stack.callback(loop.remove_signal_handler, sig)


async def _pool(settings: Settings, url: str, stack: contextlib.AsyncExitStack) -> Database:
    await ensure_schema(url)
    pool = await create_pool(url, max_size=settings.pool_max_size)

    async def close() -> None:
        with contextlib.suppress(Exception):
            await bounded(pool.close(), limit_s=settings.shutdown_timeout_s / 2)

    stack.push_async_callback(close)
    return pool


async def _join_cluster(settings: Settings, pool: Database) -> bool:
    """Applies the bucket and container counts, or refuses to join a cluster that uses others;
    once joined, the cluster's counts are exactly the settings'."""
    try:
        await PgClusterStore(pool).configure_settings(settings.bucket_counts, settings.container_count)
    except IllegalState as refused:
        log.error("cannot join this cluster: %s", refused)
        return False
    return True


async def _stop_loops(controller: Controller, loops: BackgroundLoops, shutdown_timeout_s: float) -> None:
    if loops.started and not loops.died:
        # Requests in flight get half the budget; unfinished ones stay queued.
        await controller.stop_workers(shutdown_timeout_s / 2)
    await loops.cancel()


def _log_ready(settings: Settings, servers: Servers, store_port: int | None, started_at: float) -> None:
    store = "external" if store_port is None else f"embedded {settings.segment_store_host}:{store_port}"
    log.info(
        "pgcontroller %s ready: gRPC %s:%d, REST %s:%d, segment store %s, database %s%s (%.2fs)",
        settings.instance_id,
        settings.grpc_host,
        servers.grpc_port,
        settings.rest_host,
        servers.rest_port,
        store,
        # The URL as given minus its password, so an operator sees which database was used.
        "embedded" if settings.db_url is None else f"external {masked(settings.db_url)}",
        ", all over TLS" if settings.tls_enabled else "",
        time.monotonic() - started_at,
    )


def _write_ready_file(path: Path, servers: Servers, store_port: int | None) -> None:
    ready = {"grpc_port": servers.grpc_port, "rest_port": servers.rest_port, "pid": os.getpid()}
    if store_port is not None:
        ready["segment_store_port"] = store_port
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(ready) + "\n")
    os.replace(tmp, path)
