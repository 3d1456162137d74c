"""Composition root: wires adapters into services, serves gRPC and REST, runs the loops.

One TaskGroup holds every background loop; a loop that dies takes the process down rather
than leaving it half-alive. SIGTERM/SIGINT stop intake first (servers close), then loops are
cancelled, then the pool and (if we started it) the embedded PostgreSQL are closed, all
within the shutdown timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpclib.server
from aiohttp import web

from app.api.grpc.service import ControllerService
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.config import Settings
from app.embedded_pg import EmbeddedPostgres
from app.ports import ControllerEndpoint
from app.segmentstore.embedded import EmbeddedSegmentStore
from app.segmentstore.hosts import StaticContainerMap
from app.services.health import HealthService, HealthStatus, probe_metadata_store
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.streams import StreamService
from app.store.embedded_segments import PgEmbeddedSegmentRows
from app.store.errors import translated
from app.store.migrate import ensure_schema
from app.store.pool import create_pool
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore

log = logging.getLogger("pgcontroller")


class SelfOnlyCluster:
    """ClusterView until membership lands: this process is the only controller it knows."""

    def __init__(self, endpoint: ControllerEndpoint) -> None:
        self._endpoint = endpoint

    async def live_controllers(self) -> Sequence[ControllerEndpoint]:
        return [self._endpoint]


@dataclass
class Running:
    grpc_server: grpclib.server.Server
    rest_runner: web.AppRunner
    grpc_port: int
    rest_port: int


async def _start_servers(settings: Settings, pool: Any, health: HealthService) -> Running:
    clock = SystemClock()
    scope_store = PgScopeStore(pool)
    stream_store = PgStreamStore(pool)
    segment_store = EmbeddedSegmentStore(PgEmbeddedSegmentRows(pool), clock)
    locator = StaticContainerMap(settings.container_count, settings.segment_store_hosts)
    scopes = ScopeService(scope_store, clock)
    streams = StreamService(stream_store, segment_store, clock)
    segments = SegmentQueries(stream_store, locator)

    # Bind first so an ephemeral port (0) is known before we advertise it.
    grpc_socket = _bind(settings.grpc_host, settings.grpc_port)
    grpc_port = grpc_socket.getsockname()[1]
    cluster = SelfOnlyCluster(ControllerEndpoint(settings.grpc_host, grpc_port))
    grpc_server = grpclib.server.Server([ControllerService(scopes, streams, segments, cluster)])
    await grpc_server.start(sock=grpc_socket)

    runner = web.AppRunner(create_app(scopes, streams, health), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.rest_host, settings.rest_port, reuse_address=True)
    await site.start()
    rest_port = runner.addresses[0][1] if runner.addresses else settings.rest_port
    return Running(grpc_server, runner, grpc_port, rest_port)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit this; without it a response written after an await (a database
    # read) sits behind Nagle and the peer's delayed ACK: ~40 ms per call instead of ~1 ms.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


async def serve(settings: Settings, *, ready_file: str | None = None) -> int:
    started_at = time.monotonic()
    clock = SystemClock()
    health = HealthService(clock)
    health.set("metadata-store", HealthStatus.STARTING)
    embedded: EmbeddedPostgres | None = None
    url = settings.db_url
    if url is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        started_db = await asyncio.to_thread(embedded.start)
        url = embedded.url()
        if not started_db:
            # Someone else (`pgcontroller db start`) owns it; we must not stop it on exit.
            embedded = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    pool: Any = None
    running: Running | None = None
    exit_code = 0
    try:
        await ensure_schema(url)
        pool = await create_pool(url, max_size=settings.pool_max_size)
        running = await _start_servers(settings, pool, health)

        async def ping() -> None:
            with translated():
                await pool.fetchval("SELECT 1")

        log.info(
            "pgcontroller %s ready: gRPC %s:%d, REST %s:%d, database %s (%.2fs)",
            settings.instance_id,
            settings.grpc_host,
            running.grpc_port,
            settings.rest_host,
            running.rest_port,
            "embedded" if settings.db_url is None else "external",
            time.monotonic() - started_at,
        )
        if ready_file:
            _write_ready_file(ready_file, running)
        try:
            async with asyncio.TaskGroup() as loops:
                probe = loops.create_task(
                    probe_metadata_store(health, ping, clock), name="metadata-store-probe"
                )
                background = [probe]
                await stop.wait()
                log.info("shutdown requested")
                await _stop_intake(running, settings.shutdown_timeout_s)
                running = None
                for task in background:
                    task.cancel()
        except* Exception as group:
            for exc in group.exceptions:
                log.error("a background loop died; stopping: %r", exc, exc_info=exc)
            exit_code = 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if running is not None:
            await _stop_intake(running, settings.shutdown_timeout_s)
        if pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), timeout=settings.shutdown_timeout_s / 2)
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)
    return exit_code


async def _stop_intake(running: Running, timeout_s: float) -> None:
    running.grpc_server.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(running.grpc_server.wait_closed(), timeout=timeout_s / 2)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(running.rest_runner.cleanup(), timeout=timeout_s / 2)


def _write_ready_file(path: str, running: Running) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(
            f'{{"grpc_port": {running.grpc_port}, "rest_port": {running.rest_port}, "pid": {os.getpid()}}}\n'
        )
    os.replace(tmp, path)
