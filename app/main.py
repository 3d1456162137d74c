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
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import grpclib.server
from aiohttp import web

from app.api.grpc.service import ControllerService
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.config import Settings
from app.domain.requests import REQUEST_BUCKETS, Processor
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnLimits
from app.embedded_pg import EmbeddedPostgres
from app.ports import ControllerEndpoint
from app.segmentstore.embedded import EmbeddedSegmentStore
from app.segmentstore.hosts import StaticContainerMap
from app.services.health import HealthService, HealthStatus, probe_metadata_store
from app.services.lifecycle import StreamLifecycle
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.streams import StreamService
from app.services.transactions import TransactionService
from app.store.cache import RecordCache
from app.store.embedded_segments import PgEmbeddedSegmentRows
from app.store.errors import translated
from app.store.locks import PgAdvisoryLocks
from app.store.migrate import ensure_schema
from app.store.notifications import PgListener
from app.store.pool import create_pool
from app.store.requests import PgRequestQueue
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore
from workers.buckets import REQUEST_BUCKETS_LOCK_NAMESPACE, BucketOwner
from workers.dispatcher import RequestDispatcher
from workers.handlers import abort_handlers, commit_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner
from workers.txn_gc import CompletedTxnGc
from workers.txn_timeouts import TxnTimeoutSweeper

log = logging.getLogger("pgcontroller")


class SelfOnlyCluster:
    """ClusterView until membership lands: this process is the only controller it knows."""

    def __init__(self, endpoint: ControllerEndpoint) -> None:
        self._endpoint = endpoint

    async def live_controllers(self) -> Sequence[ControllerEndpoint]:
        return [self._endpoint]


@dataclass
class Controller:
    """Everything one process runs, wired: stores, services, and the request workers."""

    pool: Any
    clock: SystemClock
    cache: RecordCache
    listener: PgListener
    scope_store: PgScopeStore
    stream_store: PgStreamStore
    requests: PgRequestQueue
    segment_store: EmbeddedSegmentStore
    locator: StaticContainerMap
    scopes: ScopeService
    streams: StreamService
    segments: SegmentQueries
    lifecycle: StreamLifecycle
    txn_store: PgTxnStore
    transactions: TransactionService
    bucket_owner: BucketOwner
    dispatcher: RequestDispatcher
    commit_dispatcher: RequestDispatcher
    abort_dispatcher: RequestDispatcher
    txn_sweeper: TxnTimeoutSweeper
    txn_gc: CompletedTxnGc

    def loops(self) -> dict[str, Coroutine[Any, Any, None]]:
        """The background loops, by name; each runs until cancelled."""
        return {
            "notifications": self.listener.run(),
            "request-buckets": self.bucket_owner.run(),
            "request-dispatcher": self.dispatcher.run(),
            "commit-dispatcher": self.commit_dispatcher.run(),
            "abort-dispatcher": self.abort_dispatcher.run(),
            "txn-timeouts": self.txn_sweeper.run(),
            "txn-gc": self.txn_gc.run(),
        }

    async def stop_workers(self, timeout_s: float) -> None:
        await asyncio.gather(
            self.dispatcher.stop(timeout_s),
            self.commit_dispatcher.stop(timeout_s),
            self.abort_dispatcher.stop(timeout_s),
        )
        await self.bucket_owner.release()


def build_controller(
    url: str,
    pool: Any,
    locator: StaticContainerMap,
    *,
    request_concurrency: int = 64,
    completion_timeout_s: float = 120.0,
    seal_busy_first_s: float = 0.1,
    poll_s: float = 1.0,
    txn_limits: TxnLimits = DEFAULT_TXN_LIMITS,
) -> Controller:
    clock = SystemClock()
    cache = RecordCache()
    listener = PgListener(url, cache)
    scope_store = PgScopeStore(pool)
    stream_store = PgStreamStore(pool, cache)
    requests = PgRequestQueue(pool)
    txn_store = PgTxnStore(pool)
    segment_store = EmbeddedSegmentStore(PgEmbeddedSegmentRows(pool), clock)
    deps = WorkflowDeps(stream_store, scope_store, segment_store, clock, txn_store)
    owner_ref: list[BucketOwner] = []

    def owns(bucket: int) -> bool:
        return owner_ref[0].owns(bucket)

    def owned() -> frozenset[int]:
        return owner_ref[0].owned()

    runner = RequestRunner(requests, stream_request_handlers(deps), clock, owns=owns)
    dispatcher = RequestDispatcher(requests, runner, owned, ceiling=request_concurrency, poll_s=poll_s)
    commit_handler = CommitTxnsHandler(deps, requests)
    commit_runner = RequestRunner(
        requests,
        commit_handlers(commit_handler),
        clock,
        processor=Processor.COMMITS,
        owns=owns,
        started_check=commit_handler.started,
    )
    commit_dispatcher = RequestDispatcher(
        requests,
        commit_runner,
        owned,
        processor=Processor.COMMITS,
        # One run commits everything pending on the stream and acknowledges the requests it
        # covered, so a stream's later commit requests wait in the database, not in memory.
        one_per_key=True,
        ceiling=request_concurrency,
        poll_s=poll_s,
    )
    abort_runner = RequestRunner(
        requests, abort_handlers(deps), clock, processor=Processor.ABORTS, owns=owns, barrier=False
    )
    abort_dispatcher = RequestDispatcher(
        requests,
        abort_runner,
        owned,
        processor=Processor.ABORTS,
        # Aborts are independent of each other: one key per request, not per stream.
        key=lambda request: f"{request.key}#{request.id}",
        ceiling=request_concurrency,
        poll_s=poll_s,
    )
    dispatchers = (dispatcher, commit_dispatcher, abort_dispatcher)

    def buckets_lost(buckets: frozenset[int]) -> None:
        for each in dispatchers:
            each.buckets_lost(buckets)

    def wake_all(*_args: object) -> None:
        for each in dispatchers:
            each.wake()

    owner = BucketOwner(
        PgAdvisoryLocks(url),
        REQUEST_BUCKETS_LOCK_NAMESPACE,
        REQUEST_BUCKETS,
        on_lost=buckets_lost,
        on_gained=wake_all,
    )
    owner_ref.append(owner)
    for each in dispatchers:
        listener.on_request(each.wake)
    listener.on_connected(wake_all)
    sweeper = TxnTimeoutSweeper(txn_store, clock, owned, txn_limits, tick_s=min(0.4, poll_s))
    return Controller(
        pool=pool,
        clock=clock,
        cache=cache,
        listener=listener,
        scope_store=scope_store,
        stream_store=stream_store,
        requests=requests,
        segment_store=segment_store,
        locator=locator,
        scopes=ScopeService(scope_store, clock),
        streams=StreamService(stream_store, segment_store, clock),
        segments=SegmentQueries(stream_store, locator),
        lifecycle=StreamLifecycle.build(
            scope_store,
            stream_store,
            requests,
            clock,
            completion_timeout_s=completion_timeout_s,
            seal_busy_first_s=seal_busy_first_s,
        ),
        txn_store=txn_store,
        transactions=TransactionService(
            stream_store,
            txn_store,
            segment_store,
            clock,
            txn_limits,
            timeouts_running=lambda: sweeper.running,
        ),
        bucket_owner=owner,
        dispatcher=dispatcher,
        commit_dispatcher=commit_dispatcher,
        abort_dispatcher=abort_dispatcher,
        txn_sweeper=sweeper,
        txn_gc=CompletedTxnGc(txn_store, clock, txn_limits),
    )


@dataclass
class Running:
    grpc_server: grpclib.server.Server
    rest_runner: web.AppRunner
    grpc_port: int
    rest_port: int


async def _start_servers(settings: Settings, controller: Controller, health: HealthService) -> Running:
    # Bind first so an ephemeral port (0) is known before we advertise it.
    grpc_socket = _bind(settings.grpc_host, settings.grpc_port)
    grpc_port = grpc_socket.getsockname()[1]
    cluster = SelfOnlyCluster(ControllerEndpoint(settings.grpc_host, grpc_port))
    grpc_server = grpclib.server.Server(
        [
            ControllerService(
                controller.scopes,
                controller.streams,
                controller.segments,
                cluster,
                controller.lifecycle,
                controller.transactions,
            )
        ]
    )
    await grpc_server.start(sock=grpc_socket)

    runner = web.AppRunner(
        create_app(
            controller.scopes, controller.streams, health, controller.lifecycle, controller.transactions
        ),
        handle_signals=False,
        access_log=None,
    )
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
        controller = build_controller(
            url,
            pool,
            StaticContainerMap(settings.container_count, settings.segment_store_hosts),
            request_concurrency=settings.request_concurrency,
            completion_timeout_s=settings.completion_timeout_s,
            txn_limits=settings.txn_limits,
        )
        running = await _start_servers(settings, controller, health)

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
                background = [
                    loops.create_task(probe_metadata_store(health, ping, clock), name="metadata-store-probe")
                ]
                for name, loop_coroutine in controller.loops().items():
                    background.append(loops.create_task(_must_not_end(name, loop_coroutine, stop), name=name))
                await stop.wait()
                log.info("shutdown requested")
                await _stop_intake(running, settings.shutdown_timeout_s)
                running = None
                # Requests in flight get what is left of the budget; unfinished ones stay queued.
                await controller.stop_workers(settings.shutdown_timeout_s / 2)
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


async def _must_not_end(name: str, loop_coroutine: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Background loops run until shutdown; one that returns before is a bug and must stop
    the process rather than leave it half-alive."""
    await loop_coroutine
    if not stop.is_set():
        raise RuntimeError(f"background loop {name!r} ended unexpectedly")


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
