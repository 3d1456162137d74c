"""Composition root: wires adapters into services, serves gRPC and REST, runs the loops.

One TaskGroup holds every background loop; a loop that dies takes the process down rather
than leaving it half-alive. SIGTERM/SIGINT stop intake first (servers close), then loops are
cancelled, then the pool and (if we started it) the embedded PostgreSQL are closed, all
within the shutdown timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any

import grpclib.server
from aiohttp import web

from app.api.grpc.cluster import ClusterRpcs
from app.api.grpc.kvtables import KvtRpcs
from app.api.grpc.readergroups import ReaderGroupRpcs
from app.api.grpc.service import ControllerService
from app.api.grpc.subscribers import SubscriberRpcs
from app.api.grpc.watermarks import WatermarkRpcs
from app.api.rest import autoscale as autoscale_routes
from app.api.rest import cluster as cluster_routes
from app.api.rest import cluster_hosts
from app.api.rest import readergroups as reader_group_routes
from app.api.rest import state_views as state_view_routes
from app.api.rest import watermarks as watermark_routes
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.config import Settings
from app.domain.cluster import DEFAULT_COUNTS, BucketCounts, BucketService, Member
from app.domain.errors import IllegalState
from app.domain.requests import Processor
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnLimits
from app.embedded_pg import EmbeddedPostgres
from app.ports import SegmentStoreHost
from app.segmentstore.embedded import EmbeddedSegmentStore
from app.segmentstore.hosts import HostAddress, SharedContainerMap
from app.segmentstore.traffic import AppendingSegmentStore, TrafficRecordingSegmentStore, TrafficSimulator
from app.services.autoscale import AutoScaleIntake
from app.services.cluster import ClusterQueries, LocalView
from app.services.containers import ContainerMapService
from app.services.health import HealthService, HealthStatus, probe_metadata_store
from app.services.kvtables import KvtService
from app.services.lifecycle import StreamLifecycle
from app.services.readergroups import ReaderGroupService
from app.services.retention import DEFAULT_RETENTION_FREQUENCY_MS, RetentionService, SubscriberService
from app.services.scopes import ScopeService
from app.services.segments import SegmentQueries
from app.services.state_views import StateViewService, ViewAggregation
from app.services.streams import StreamService
from app.services.transactions import TransactionService
from app.services.watermarks import WatermarkService
from app.store.autoscale import PgAutoScaleStore
from app.store.cache import RecordCache
from app.store.cluster import MEMBER_APPLICATION_PREFIX, PgClusterStore
from app.store.containers import PgContainerMapStore
from app.store.embedded_segments import PgEmbeddedSegmentRows
from app.store.errors import translated
from app.store.kvtables import PgKvtStore
from app.store.locks import PgAdvisoryLocks
from app.store.migrate import ensure_schema
from app.store.notifications import PgListener
from app.store.pool import create_pool
from app.store.readergroups import PgReaderGroupStore
from app.store.requests import PgRequestQueue
from app.store.retention import PgRetentionStore
from app.store.scopes import PgScopeStore
from app.store.state_views import PgStateViewStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore
from app.store.watermarks import PgWatermarkStore
from workers.buckets import BucketClaims
from workers.cluster import ClusterNode
from workers.containers import DEFAULT_REBALANCE_DELAY_S, ContainerBalancerDuty
from workers.dispatcher import RequestDispatcher
from workers.handlers import abort_handlers, commit_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.handlers.kvtables import delete_kvts_in_scope, kvt_handlers
from workers.handlers.readergroups import (
    ReaderGroupDeps,
    delete_reader_groups_in_scope,
    reader_group_handlers,
)
from workers.retention import RetentionWorker
from workers.runner import RequestRunner
from workers.state_views import StateViewAggregator
from workers.txn_gc import CompletedTxnGc
from workers.txn_timeouts import TxnTimeoutSweeper
from workers.watermarking import DEFAULT_PERIOD_MS as DEFAULT_WATERMARK_PERIOD_MS
from workers.watermarking import WatermarkWorker

log = logging.getLogger("pgcontroller")


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
    segment_store: AppendingSegmentStore
    locator: SharedContainerMap
    container_map: ContainerMapService
    scopes: ScopeService
    streams: StreamService
    segments: SegmentQueries
    lifecycle: StreamLifecycle
    txn_store: PgTxnStore
    transactions: TransactionService
    cluster_store: PgClusterStore
    cluster_node: ClusterNode
    cluster_queries: ClusterQueries
    dispatcher: RequestDispatcher
    commit_dispatcher: RequestDispatcher
    abort_dispatcher: RequestDispatcher
    txn_sweeper: TxnTimeoutSweeper
    txn_gc: CompletedTxnGc
    autoscale: AutoScaleIntake
    subscribers: SubscriberService
    reader_groups: ReaderGroupService
    kvts: KvtService
    retention_worker: RetentionWorker
    watermarks: WatermarkService
    watermark_worker: WatermarkWorker
    state_views: StateViewService
    state_view_aggregator: StateViewAggregator
    traffic: TrafficSimulator | None = None
    traffic_period_s: float = 5.0

    def loops(self) -> dict[str, Coroutine[Any, Any, None]]:
        """The background loops, by name; each runs until cancelled."""
        return {
            "notifications": self.listener.run(),
            "cluster": self.cluster_node.run(),
            "container-map": self.locator.run(),
            "retention": self.retention_worker.run(),
            "watermarks": self.watermark_worker.run(),
            "state-views": self.state_view_aggregator.run(),
            **({"traffic-reports": self.traffic.run(self.traffic_period_s)} if self.traffic else {}),
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
        await self.cluster_node.release()

    def advertise(self, host: str, grpc_port: int, rest_port: int) -> None:
        """Sets the endpoints this process registers under; call before the loops start."""
        node = self.cluster_node
        node.advertise(replace(node.member, host=host, grpc_port=grpc_port, rest_port=rest_port))


def build_controller(
    url: str,
    pool: Any,
    static_hosts: Sequence[HostAddress],
    *,
    counts: BucketCounts = DEFAULT_COUNTS,
    container_count: int = 4,
    container_rebalance_delay_s: float = DEFAULT_REBALANCE_DELAY_S,
    member_id: str | None = None,
    request_concurrency: int = 64,
    completion_timeout_s: float = 120.0,
    seal_busy_first_s: float = 0.1,
    poll_s: float = 1.0,
    txn_limits: TxnLimits = DEFAULT_TXN_LIMITS,
    cluster_interval_s: float = 0.5,
    member_ttl_ms: int = 5_000,
    rebalance_delay_ms: int = 2_000,
    simulate_traffic: bool = False,
    traffic_period_s: float = 5.0,
    retention_frequency_ms: int = DEFAULT_RETENTION_FREQUENCY_MS,
    watermark_period_ms: int = DEFAULT_WATERMARK_PERIOD_MS,
) -> Controller:
    clock = SystemClock()
    cache = RecordCache()
    listener = PgListener(url, cache)
    scope_store = PgScopeStore(pool)
    stream_store = PgStreamStore(pool, cache)
    requests = PgRequestQueue(pool)
    txn_store = PgTxnStore(pool)
    cluster_store = PgClusterStore(pool)
    autoscale_store = PgAutoScaleStore(pool)
    autoscale = AutoScaleIntake(autoscale_store, clock)
    segment_store: AppendingSegmentStore = EmbeddedSegmentStore(PgEmbeddedSegmentRows(pool), clock)
    traffic = None
    if simulate_traffic:
        # Appends are counted as traffic and turned into scale reports, as a segment store would.
        traffic = TrafficSimulator(autoscale, clock)
        segment_store = TrafficRecordingSegmentStore(segment_store, traffic)
    deps = WorkflowDeps(stream_store, scope_store, segment_store, clock, txn_store)
    member_id = member_id or new_member_id()
    locks = PgAdvisoryLocks(url, application_name=MEMBER_APPLICATION_PREFIX + member_id)
    dispatchers: list[RequestDispatcher] = []

    def requests_lost(buckets: frozenset[int]) -> None:
        for each in dispatchers:
            each.buckets_lost(buckets)

    def wake_all(*_args: object) -> None:
        for each in dispatchers:
            each.wake()

    claims = {
        service: BucketClaims(
            service,
            locks,
            cluster_store,
            clock,
            member_id,
            on_lost=requests_lost if service is BucketService.REQUESTS else lambda _lost: None,
            on_gained=wake_all if service is BucketService.REQUESTS else lambda _gained: None,
        )
        for service in BucketService
    }
    request_claims = claims[BucketService.REQUESTS]
    owns, owned, fence_for = request_claims.owns, request_claims.owned, request_claims.fence_for

    retention_store = PgRetentionStore(pool)
    subscribers = SubscriberService(stream_store, retention_store, clock)
    reader_group_store = PgReaderGroupStore(pool)
    reader_group_deps = ReaderGroupDeps(deps, reader_group_store, subscribers)

    kvt_store = PgKvtStore(pool)

    async def delete_reader_groups(scope: str) -> None:
        await delete_reader_groups_in_scope(reader_group_deps, scope)

    async def delete_kvts(scope: str) -> None:
        await delete_kvts_in_scope(deps, kvt_store, scope)

    runner = RequestRunner(
        requests,
        {
            **stream_request_handlers(
                deps, cold_markers=autoscale_store, scope_member_deletions=[delete_reader_groups, delete_kvts]
            ),
            **reader_group_handlers(deps, reader_group_store, subscribers),
            **kvt_handlers(deps, kvt_store),
        },
        clock,
        owns=owns,
        fence_for=fence_for,
    )
    dispatcher = RequestDispatcher(requests, runner, owned, ceiling=request_concurrency, poll_s=poll_s)
    watermarks = WatermarkService(PgWatermarkStore(pool), clock)
    commit_handler = CommitTxnsHandler(deps, requests, writer_marks=watermarks, fence_for=fence_for)
    commit_runner = RequestRunner(
        requests,
        commit_handlers(commit_handler),
        clock,
        processor=Processor.COMMITS,
        owns=owns,
        fence_for=fence_for,
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
        requests,
        abort_handlers(deps),
        clock,
        processor=Processor.ABORTS,
        owns=owns,
        fence_for=fence_for,
        barrier=False,
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
    dispatchers.extend((dispatcher, commit_dispatcher, abort_dispatcher))
    now = clock.now_ms()
    node = ClusterNode(
        cluster_store,
        locks,
        clock,
        Member(member_id, "", 0, 0, now, now),
        claims,
        counts,
        interval_s=cluster_interval_s,
        member_ttl_ms=member_ttl_ms,
        rebalance_delay_ms=rebalance_delay_ms,
    )
    container_store = PgContainerMapStore(pool)
    locator = SharedContainerMap(container_count, static_hosts, container_store)
    container_map = ContainerMapService(
        container_store, clock, container_count, [SegmentStoreHost(h.host, h.port) for h in static_hosts]
    )
    balancer = ContainerBalancerDuty(container_map, clock, rebalance_delay_s=container_rebalance_delay_s)

    async def balance_containers() -> None:
        await balancer.run_once()

    node.add_leader_duty(balance_containers, on_leadership=balancer.reset)
    for each in dispatchers:
        listener.on_request(each.wake)
    listener.on_connected(wake_all)
    listener.on_connected(locator.wake)
    listener.on_cluster_change(node.wake)
    listener.on_cluster_change(locator.changed)
    retention_claims = claims[BucketService.RETENTION]
    retention_worker = RetentionWorker(
        retention_store,
        RetentionService(
            stream_store, retention_store, segment_store, clock, frequency_ms=retention_frequency_ms
        ),
        clock,
        owned=retention_claims.owned,
        bucket_count=counts.retention,
        fence_for=retention_claims.fence_for,
        frequency_ms=retention_frequency_ms,
    )
    watermark_claims = claims[BucketService.WATERMARKS]
    watermark_worker = WatermarkWorker(
        watermarks,
        watermark_claims.owned,
        counts.watermarks,
        watermark_claims.fence_for,
        clock,
        period_ms=watermark_period_ms,
    )
    state_view_store = PgStateViewStore(pool)
    state_views = StateViewService(state_view_store, clock)
    # Leader-only; its writes are fenced by the leader term, so a deposed leader lands nothing.
    state_view_aggregator = StateViewAggregator(
        ViewAggregation(state_view_store, clock),
        is_leader=lambda: node.is_leader,
        leader_term=lambda: node.leader_term,
    )
    listener.on_state_change(state_view_aggregator.wake)
    listener.on_view_change(state_views.view_changed)
    listener.on_connected(state_view_aggregator.wake)
    listener.on_connected(state_views.wake_all)
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
        container_map=container_map,
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
        cluster_store=cluster_store,
        cluster_node=node,
        cluster_queries=ClusterQueries(
            cluster_store,
            clock,
            member_ttl_ms,
            lambda: LocalView(
                node.member.id, node.is_leader, {service: c.owned() for service, c in node.claims.items()}
            ),
        ),
        dispatcher=dispatcher,
        commit_dispatcher=commit_dispatcher,
        abort_dispatcher=abort_dispatcher,
        txn_sweeper=sweeper,
        # Cluster-wide sweep: only the leader runs it.
        txn_gc=CompletedTxnGc(txn_store, clock, txn_limits, leads=lambda: node.is_leader),
        autoscale=autoscale,
        subscribers=subscribers,
        reader_groups=ReaderGroupService(
            reader_group_store, scope_store, clock, completion_timeout_s=completion_timeout_s
        ),
        kvts=KvtService(kvt_store, clock, completion_timeout_s=completion_timeout_s),
        retention_worker=retention_worker,
        watermarks=watermarks,
        watermark_worker=watermark_worker,
        state_views=state_views,
        state_view_aggregator=state_view_aggregator,
        traffic=traffic,
        traffic_period_s=traffic_period_s,
    )


# application_name holds 63 bytes; the member prefix takes 11 of them.
MAX_MEMBER_ID = 52


def new_member_id() -> str:
    # Short enough for application_name (63 bytes) with its prefix; unique per process start.
    return f"{socket.gethostname()[:24]}-{uuid.uuid4().hex[:12]}"


def grpc_extensions(controller: Controller) -> list[object]:
    """The capability objects serving RPCs beyond ControllerService's own."""
    return [
        ClusterRpcs(controller.cluster_queries),
        SubscriberRpcs(controller.subscribers),
        ReaderGroupRpcs(controller.reader_groups),
        KvtRpcs(controller.kvts),
        WatermarkRpcs(controller.watermarks),
    ]


def rest_extensions(controller: Controller) -> list[Callable[[web.Application], None]]:
    return [
        cluster_routes.extension(controller.cluster_queries),
        cluster_hosts.extension(controller.container_map),
        autoscale_routes.extension(controller.autoscale),
        watermark_routes.extension(controller.watermarks),
        reader_group_routes.extension(controller.reader_groups),
        state_view_routes.extension(controller.state_views),
    ]


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
    grpc_server = grpclib.server.Server(
        [
            ControllerService(
                controller.scopes,
                controller.streams,
                controller.segments,
                controller.cluster_queries,
                controller.lifecycle,
                controller.transactions,
                grpc_extensions(controller),
            )
        ]
    )
    await grpc_server.start(sock=grpc_socket)

    runner = web.AppRunner(
        create_app(
            controller.scopes,
            controller.streams,
            health,
            controller.lifecycle,
            controller.transactions,
            rest_extensions(controller),
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


async def serve(settings: Settings) -> int:
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
        try:
            cluster = await PgClusterStore(pool).configure_settings(
                settings.bucket_counts, settings.container_count
            )
        except IllegalState as refused:
            log.error("cannot join this cluster: %s", refused)
            return 2
        controller = build_controller(
            url,
            pool,
            settings.segment_store_hosts,
            counts=cluster.counts,
            container_count=cluster.container_count,
            container_rebalance_delay_s=settings.container_rebalance_delay_s,
            member_id=settings.instance_id[:MAX_MEMBER_ID],
            request_concurrency=settings.request_concurrency,
            completion_timeout_s=settings.completion_timeout_s,
            seal_busy_first_s=settings.seal_busy_first_s,
            poll_s=settings.request_poll_s,
            cluster_interval_s=settings.cluster_interval_s,
            txn_limits=settings.txn_limits,
            member_ttl_ms=int(settings.member_ttl_s * 1000),
            rebalance_delay_ms=int(settings.rebalance_delay_s * 1000),
            simulate_traffic=settings.simulate_traffic,
            traffic_period_s=settings.traffic_report_period_s,
            retention_frequency_ms=settings.retention_frequency_ms,
            watermark_period_ms=settings.watermark_period_ms,
        )
        running = await _start_servers(settings, controller, health)
        # Start-up objects live for the whole run: keeping them out of the collector's full
        # passes cuts those pauses (tens of ms on a busy process) from every later read.
        gc.freeze()
        controller.advertise(settings.advertised_host(), running.grpc_port, running.rest_port)

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
        if settings.ready_file:
            _write_ready_file(str(settings.ready_file), running)
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
            for died in group.exceptions:
                log.error("a background loop died; stopping: %r", died, exc_info=died)
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
