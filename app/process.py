"""The one entry of every process: `open_process` composes a controller (`serve`, each child of
`serve --processes N`, the test harness) or a segment store (`pgcontroller segment-store`) from
settings, runs it, and yields a `Runtime` record of what runs; leaving the block stops it.

Every resource is pushed on one AsyncExitStack as it is acquired and released in reverse, on stop
or failure: readiness turns false and the gRPC calls in flight get the drain window, then intake
stops (the servers close), then the workers get half the shutdown budget, then the background
tasks are cancelled, the stores close, the pool is closed and the embedded PostgreSQL (if this
process started it) is stopped.

One supervision policy: every background task of the process (the controller's loops, the
metadata-store probe, the segment store's membership, listener and orphan sweep) runs under one
`BackgroundLoops`; one that dies is logged and ends the process with exit code 1 (the supervisor
of `serve --processes N`, or the operator's, restarts it) rather than leave it half-alive.

A process that owns its OS process (the CLI's) also keeps its large buffers' memory for reuse
(app/native_heap.py), stops on SIGTERM/SIGINT, freezes its start-up objects out of the collector,
writes its ready file and arms the shutdown watchdog (one budget for the whole shutdown: a step
that never returns is reported with every stack and the process exits anyway). The test harness
runs the same composition inside pytest without those five.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import gc
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.clock import SystemClock
from app.domain.errors import IllegalState, StoreUnavailable
from app.embedded_pg import EmbeddedPostgres
from app.native_heap import keep_large_buffers
from app.observability.access_sampling import sample_access_log
from app.observability.task_dump import dump_tasks_on_sigusr1
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
    open_resources,
    register_contributors,
    start_embedded_segment_store,
    start_servers,
    wire,
    with_embedded_store,
)
from app.wiring.accept_errors import quiet_accept_errors
from app.wiring.embedded_db import guard_database, keep_embedded_database
from app.wiring.segment_store import RunningStore, embedded_store_address, start_segment_store
from app.wiring.shutdown_watchdog import ShutdownWatchdog, shutdown_budget_s
from app.wiring.store_listener import MetricsListener, start_metrics_listener, store_health, watch_store

log = logging.getLogger("pgcontroller")
store_log = logging.getLogger("pgcontroller.segment-store")

EXIT_TASK_DIED = 1
EXIT_CANNOT_JOIN = 2
# A segment store that cannot start (no database, its port, the cluster's settings) exits 1.
EXIT_STORE_FAILED = 1


class Role(enum.Enum):
    CONTROLLER = "controller"
    SEGMENT_STORE = "segment-store"


class ProcessRefused(Exception):
    """The process cannot start as configured; the message says why, for the operator."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ProcessOptions:
    # The CLI's processes own their OS process; the test harness shares pytest's.
    owns_process: bool = True
    # The controller's gRPC and REST listeners (the harness starts its own, on loopback ports).
    servers: bool = True
    # The controller's background loops and the metadata-store probe.
    workers: bool = True


HARNESS = ProcessOptions(owns_process=False, servers=False)


@dataclass
class Runtime:
    """What a process runs, for its entry to wait on and for tests to inspect."""

    role: Role
    settings: Settings
    url: str
    pool: Database
    health: HealthService
    stop: asyncio.Event
    loops: BackgroundLoops
    controller: Controller | None = None
    store: RunningStore | None = None
    servers: Servers | None = None
    metrics: MetricsListener | None = None
    started_at: float = field(default_factory=time.monotonic)

    async def until_stopped(self) -> int:
        """Waits for SIGTERM/SIGINT (or `stop`) and returns the exit code: 0, or 1 when a
        background task died."""
        await self.stop.wait()
        if not self.loops.died:
            logging.getLogger(_logger_name(self.role)).info("shutdown requested")
        return EXIT_TASK_DIED if self.loops.died else 0


@asynccontextmanager
async def open_process(
    settings: Settings, role: Role = Role.CONTROLLER, options: ProcessOptions = ProcessOptions()
) -> AsyncIterator[Runtime]:
    """The process composed, started and serving; stopped, in reverse, when the block is left.
    Raises ProcessRefused when it cannot start as configured."""
    stop = asyncio.Event()
    loops = BackgroundLoops(stop, logging.getLogger(_logger_name(role)))
    # A store has no drain window: its clients do not wait for a balancer, they reconnect to
    # whichever store getURI names next.
    drain_s = settings.shutdown_drain_s if role is Role.CONTROLLER else 0.0
    watchdog = ShutdownWatchdog(shutdown_budget_s(drain_s, settings.shutdown_timeout_s))
    async with AsyncExitStack() as stack:
        if options.owns_process:
            keep_large_buffers()
            stack.callback(watchdog.disarm)  # first in, so the last step out: the budget covers every other
            # Failed accepts (out of descriptors) are counted and logged once per interval, not
            # one traceback each; only a process's own loop gets the handler, never pytest's.
            stack.callback(quiet_accept_errors(asyncio.get_running_loop()))
        url, started = await _database(settings, role, stack)
        if options.owns_process:
            _stop_on_signals(stop, stack)
        health = HealthService(SystemClock()) if role is Role.CONTROLLER else store_health()
        if started is not None:
            # Kept from here on: a database that dies during the start-up is restarted too.
            keep_embedded_database(started, settings.embedded_db_restart_attempts, health, loops, stack, log)
        pool = await _pool(settings, url, stack)
        runtime = Runtime(role, settings, url, pool, health, stop, loops)
        if role is Role.CONTROLLER:
            await _compose_controller(runtime, stack, options)
        else:
            await _compose_segment_store(runtime, stack)
        if options.owns_process:
            # Start-up objects live for the whole run: keeping them out of the collector's full
            # passes cuts those pauses (tens of ms on a busy process) from every later read.
            gc.freeze()
            if runtime.settings.ready_file is not None:
                _write_ready_file(runtime.settings.ready_file, _ready_record(runtime))
        _log_ready(runtime)
        if runtime.controller is not None and options.workers:
            _start_controller_loops(runtime)
        try:
            yield runtime
        finally:
            # Leaving the block is the stop, signal or not: loops that end from here on end as asked.
            stop.set()
            if options.owns_process:
                watchdog.arm()


def _logger_name(role: Role) -> str:
    return "pgcontroller" if role is Role.CONTROLLER else "pgcontroller.segment-store"


async def _database(
    settings: Settings, role: Role, stack: AsyncExitStack
) -> tuple[str, EmbeddedPostgres | None]:
    """The database URL: settings.db_url, or the embedded PostgreSQL's; and the embedded server when
    this process owns it (started it, or adopted it from a killed one), to keep it running. A
    controller starts it if need be; a segment store only joins one that runs."""
    if settings.db_url is not None:
        return settings.db_url, None
    embedded = EmbeddedPostgres(settings.data_dir)
    if role is Role.SEGMENT_STORE:
        if not embedded.is_running():
            raise ProcessRefused(
                EXIT_STORE_FAILED, "no database: give --db-url, or start one with `pgcontroller db start`"
            )
        return embedded.url(), None
    if await asyncio.to_thread(embedded.start, owned=True):
        stack.push_async_callback(asyncio.to_thread, embedded.stop)
        guard_database(embedded, stack)
        return embedded.url(), embedded
    # Otherwise someone else (`pgcontroller db start`, a live serve) owns it; we must not stop it on exit.
    return embedded.url(), None


def _stop_on_signals(stop: asyncio.Event, stack: AsyncExitStack) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
        stack.callback(loop.remove_signal_handler, sig)
    dump_tasks_on_sigusr1()


async def _pool(settings: Settings, url: str, stack: AsyncExitStack) -> Database:
    await ensure_schema(url)
    pool = await create_pool(url, max_size=settings.pool_max_size)

    async def close() -> None:
        with contextlib.suppress(Exception):
            await bounded(pool.close(), limit_s=settings.shutdown_timeout_s / 2)

    stack.push_async_callback(close)
    return pool


# --- the controller ------------------------------------------------------------------------------


async def _compose_controller(runtime: Runtime, stack: AsyncExitStack, options: ProcessOptions) -> None:
    settings, pool, clock = runtime.settings, runtime.pool, SystemClock()
    runtime.health.set("metadata-store", HealthStatus.STARTING)
    await _join_cluster(settings, pool)
    try:
        store = await start_embedded_segment_store(settings, pool, clock, runtime.loops, runtime.url)
    except ValueError as exc:
        raise ProcessRefused(EXIT_STORE_FAILED, str(exc)) from exc
    if store is not None:
        stack.push_async_callback(store.close)
    runtime.store = store
    runtime.settings = settings = with_embedded_store(settings, store)
    controller = wire(settings, open_resources(settings, runtime.url, pool))
    runtime.controller = controller
    # Closed after the workers stop (they call the stores) and before the embedded store.
    stack.push_async_callback(controller.storage.client.close)
    probe = PgProbe(runtime.url)  # closed after the loops, which use it, have stopped
    stack.push_async_callback(probe.close)
    # Pushed before the servers start, so on the way out intake stops before the workers do.
    stack.push_async_callback(_stop_loops, controller, runtime.loops, settings.shutdown_timeout_s)
    register_contributors(runtime.health, controller, runtime.loops.running, store)
    if options.workers:
        runtime.loops.start(
            "metadata-store-probe",
            functools.partial(probe_metadata_store, runtime.health, probe.ping, clock, lost=probe.lost),
        )
    if not options.servers:
        return
    # Removed after the servers close: their last lines are sampled too, and the counts written.
    stack.callback(sample_access_log(settings.access_log_alike_per_second))
    servers = await start_servers(settings, controller, runtime.health)
    runtime.servers = servers
    stack.push_async_callback(servers.close, settings.shutdown_timeout_s)
    # Runs before the close: orchestrators see "not ready" while calls in flight finish.
    stack.push_async_callback(servers.drain, runtime.health, settings.shutdown_drain_s)
    controller.advertise(settings.advertised_host(), servers.grpc_port, servers.rest_port)


async def _join_cluster(settings: Settings, pool: Database) -> None:
    """Applies the bucket and container counts, or refuses to join a cluster that uses others;
    once joined, the cluster's counts are exactly the settings'."""
    try:
        await PgClusterStore(pool).configure_settings(settings.bucket_counts, settings.container_count)
    except IllegalState as refused:
        raise ProcessRefused(EXIT_CANNOT_JOIN, f"cannot join this cluster: {refused}") from refused


def _start_controller_loops(runtime: Runtime) -> None:
    assert runtime.controller is not None
    for name, loop in runtime.controller.loops().items():
        runtime.loops.start(name, loop)


async def _stop_loops(controller: Controller, loops: BackgroundLoops, shutdown_timeout_s: float) -> None:
    if loops.started and not loops.died:
        # Requests in flight get half the budget; unfinished ones stay queued.
        await controller.stop_workers(shutdown_timeout_s / 2)
    await loops.cancel()


# --- the segment store ---------------------------------------------------------------------------


async def _compose_segment_store(runtime: Runtime, stack: AsyncExitStack) -> None:
    try:
        cluster = await PgClusterStore(runtime.pool).get_settings()
    except (IllegalState, StoreUnavailable) as exc:
        raise ProcessRefused(EXIT_STORE_FAILED, f"cannot read the cluster's settings: {exc}") from exc
    # The container count is the cluster's, fixed for its life: never this process's default.
    runtime.settings = settings = replace(runtime.settings, container_count=cluster.container_count)
    # Bound before the store starts: a port already taken stops the process before it registers
    # (a store that joined and left at once would move containers for nothing). It closes after
    # the store, so a last scrape still reads the final counts.
    try:
        metrics = await start_metrics_listener(settings, runtime.health)
    except OSError as exc:
        where = f"{settings.segment_store_host}:{settings.segment_store_metrics_port}"
        raise ProcessRefused(
            EXIT_STORE_FAILED,
            f"cannot listen for metrics on {where} (--segment-store-metrics-port, or --no-metrics): "
            f"{exc.strerror or exc}",
        ) from exc
    if metrics is not None:
        stack.push_async_callback(metrics.close, settings.shutdown_timeout_s / 2)
    runtime.metrics = metrics
    try:
        store = await start_segment_store(
            settings, runtime.pool, SystemClock(), runtime.loops, runtime.url, settings.segment_store_hosts
        )
    except ValueError as exc:
        raise ProcessRefused(EXIT_STORE_FAILED, str(exc)) from exc
    runtime.store = store
    stack.push_async_callback(store.close)
    # Readiness answers false while the store deregisters and closes.
    stack.callback(runtime.health.drain)
    stack.push_async_callback(runtime.loops.cancel)
    watch_store(runtime.health, store)


# --- announcing ----------------------------------------------------------------------------------


def _log_ready(runtime: Runtime) -> None:
    settings, elapsed = runtime.settings, time.monotonic() - runtime.started_at
    if runtime.role is Role.SEGMENT_STORE:
        assert runtime.store is not None
        address = embedded_store_address(settings, runtime.store.server)
        metrics = runtime.metrics
        store_log.info(
            "segment store %s:%d ready (%d containers in the cluster); %s",
            address.host,
            address.port,
            settings.container_count,
            "no metrics listener" if metrics is None else f"metrics and probes on port {metrics.port}",
        )
        return
    servers = runtime.servers
    store_port = runtime.store.address[1] if runtime.store is not None else None
    store = "external" if store_port is None else f"embedded {settings.segment_store_host}:{store_port}"
    log.info(
        "pgcontroller %s ready: gRPC %s:%s, REST %s:%s, segment store %s, database %s%s (%.2fs)",
        settings.instance_id,
        settings.grpc_host,
        servers.grpc_port if servers is not None else "-",
        settings.rest_host,
        servers.rest_port if servers is not None else "-",
        store,
        # The URL as given minus its password, so an operator sees which database was used.
        "embedded" if settings.db_url is None else f"external {masked(settings.db_url)}",
        ", all over TLS" if settings.tls_enabled else "",
        elapsed,
    )


def _ready_record(runtime: Runtime) -> dict[str, int]:
    """The ready file's content: the ports this process serves on and its pid."""
    ready = {"pid": os.getpid()}
    if runtime.servers is not None:
        ready |= {"grpc_port": runtime.servers.grpc_port, "rest_port": runtime.servers.rest_port}
    if runtime.store is not None:
        ready["segment_store_port"] = runtime.store.address[1]
    if runtime.metrics is not None:
        ready["metrics_port"] = runtime.metrics.port
    return ready


def _write_ready_file(path: Path, ready: dict[str, int]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(ready) + "\n")
    os.replace(tmp, path)
