"""The gRPC and REST listeners over a wired controller: bound before anything is advertised (so an
ephemeral port is known), drained then closed first on shutdown (so no new work arrives while
workers stop, and no call in flight is cut short while the drain window lasts)."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from dataclasses import dataclass, field

import grpclib.server
from aiohttp import web

from app.api.grpc.access_log import attach as attach_access_log
from app.api.grpc.auth import GrpcGuard
from app.api.grpc.coalescing import limit_connections
from app.api.grpc.h2_limits import H2Limits
from app.api.grpc.health import health_service
from app.api.grpc.inflight import InFlightCalls
from app.api.grpc.limits import bounded_server
from app.api.grpc.service import ControllerService
from app.api.rest.app import create_app
from app.api.rest.auth import auth_middleware
from app.api.rest.metrics import metrics_routes
from app.observability.logs import ACCESS_LOGGER
from app.security.authn import Authenticator
from app.security.guessing import GuessLimits
from app.security.plugins import load_handlers
from app.security.tls import ALPN_GRPC, server_context
from app.services.health import HealthService, HealthStatus
from app.settings import Settings
from app.store.accounts import PgAccountStore
from app.store.metrics_gauges import gauge_refresher
from app.waiting import bounded
from app.wiring.connection_cap import ConnectionCap, ReservingListener, capped, descriptor_ceiling
from app.wiring.controller import Controller, grpc_extensions, rest_extensions
from app.wiring.http_listener import listen_http
from app.wiring.resources import RestExtension


@dataclass(frozen=True)
class Servers:
    grpc_server: grpclib.server.Server
    rest_runner: web.AppRunner
    grpc_port: int
    rest_port: int
    in_flight: InFlightCalls = field(default_factory=InFlightCalls)
    grpc_connections: ConnectionCap | None = None

    async def drain(self, health: HealthService, window_s: float) -> None:
        """Readiness turns false at once; gRPC calls in flight get up to `window_s` to finish
        while the listeners still accept (a balancer may send a call before it sees the verdict)."""
        health.drain()
        await self.in_flight.wait_idle(window_s)

    async def close(self, timeout_s: float) -> None:
        """Stops intake; each server gets half of `timeout_s` to finish its calls in flight."""
        self.grpc_server.close()
        if self.grpc_connections is not None:
            self.grpc_connections.close()
        with contextlib.suppress(TimeoutError):
            await bounded(self.grpc_server.wait_closed(), limit_s=timeout_s / 2)
        with contextlib.suppress(TimeoutError):
            await bounded(self.rest_runner.cleanup(), limit_s=timeout_s / 2)


def _authenticator(settings: Settings, controller: Controller) -> Authenticator | None:
    """One per process, shared by gRPC and REST so a credential verified on one is cached for both."""
    if not settings.auth_enabled:
        return None
    resources = controller.resources
    # A plugin that cannot load is a SettingError: serve stops with one line (exit 2).
    plugins = load_handlers(settings)
    limits = GuessLimits(
        concurrency=settings.auth_check_concurrency,
        queue=settings.auth_check_queue,
        per_source=settings.auth_checks_per_source,
        source_failures_per_s=settings.auth_failures_per_source_per_s,
        source_failure_burst=settings.auth_failure_burst_per_source,
        failures_per_s=settings.auth_failures_per_s,
        failure_burst=settings.auth_failure_burst,
    )
    return Authenticator(
        PgAccountStore(resources.pool), resources.clock.now_ms, plugins=plugins, limits=limits
    )


def _rest_extensions(settings: Settings, controller: Controller) -> list[RestExtension]:
    extensions = rest_extensions(controller)
    if settings.no_metrics:
        return extensions
    resources = controller.resources
    owned = {service.value: claims.owned for service, claims in controller.membership.claims.items()}
    refresh = gauge_refresher(
        resources.pool, resources.clock.now_ms, resources.listener.connected.is_set, owned
    )
    return [*extensions, metrics_routes([refresh])]


async def start_servers(settings: Settings, controller: Controller, health: HealthService) -> Servers:
    # The access log's off switch: its lines are INFO, so WARNING silences them and nothing else.
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING if settings.no_access_log else logging.NOTSET)
    authenticator = _authenticator(settings, controller)
    in_flight = InFlightCalls()
    grpc_server, grpc_port, grpc_connections = await _start_grpc(
        settings, controller, authenticator, health, in_flight
    )
    app = create_app(
        controller.scopes,
        controller.streams,
        health,
        controller.lifecycle,
        controller.transactions,
        _rest_extensions(settings, controller),
        auth=None if authenticator is None else auth_middleware(authenticator),
    )
    try:
        runner, rest_port = await listen_http(app, settings, settings.rest_host, settings.rest_port)
    except BaseException:
        grpc_server.close()
        grpc_connections.close()
        await grpc_server.wait_closed()
        raise
    health.set("grpc-server", HealthStatus.UP, port=str(grpc_port))
    return Servers(grpc_server, runner, grpc_port, rest_port, in_flight, grpc_connections)


async def _start_grpc(
    settings: Settings,
    controller: Controller,
    authenticator: Authenticator | None,
    health: HealthService,
    in_flight: InFlightCalls,
) -> tuple[grpclib.server.Server, int, ConnectionCap]:
    tls = server_context(settings, ALPN_GRPC)
    cap = ConnectionCap(
        f"gRPC port {settings.grpc_port}",
        settings.grpc_max_connections,
        descriptor_ceiling(settings.fd_reserve),
        refusal=_GOAWAY_REFUSAL,
        encrypted=tls is not None,
    )
    # Bind first so an ephemeral port (0) is known before we advertise it.
    sock = _bind(settings.grpc_host, settings.grpc_port, cap, reuse_port=settings.reuse_port)
    # Message size limit and the checked codec (app/api/grpc/limits.py): grpclib has neither.
    service = ControllerService(
        controller.scopes,
        controller.streams,
        controller.segments,
        controller.cluster_queries,
        controller.lifecycle,
        controller.transactions,
        grpc_extensions(controller),
        guard=None if authenticator is None else GrpcGuard(authenticator),
        tokens=controller.storage.tokens,
        metrics=not settings.no_metrics,
    )
    server = bounded_server([service, health_service(health, service)])
    # Pre-auth HTTP/2 abuse (rapid reset, PING/SETTINGS floods): app/api/grpc/h2_limits.py.
    limit_connections(
        server,
        H2Limits(
            max_concurrent_streams=settings.grpc_max_concurrent_streams,
            max_calls_before_first_reply=settings.grpc_max_calls_before_first_reply,
            max_replies_building_before_first_reply=settings.grpc_max_replies_building_before_first_reply,
            max_resets_per_window=settings.grpc_max_resets_per_window,
            max_pings_per_window=settings.grpc_max_pings_per_window,
            max_settings_per_window=settings.grpc_max_settings_per_window,
            window_s=settings.grpc_frame_window_s,
            max_header_list_bytes=settings.grpc_max_header_list_bytes,
            max_unsent_bytes_per_connection=settings.grpc_max_unsent_bytes_per_connection,
            max_unsent_bytes=settings.grpc_max_unsent_bytes,
            send_stall_s=settings.grpc_send_stall_s,
        ),
    )
    in_flight.attach(server)
    attach_access_log(server)
    # grpclib makes each connection's protocol with this method: the cap admits the connection
    # first, so one past it costs no handler, no h2 state and no SETTINGS exchange.
    server._protocol_factory = capped(server._protocol_factory, cap)  # type: ignore[assignment,method-assign]
    await server.start(sock=sock, ssl=tls)
    bound = int(sock.getsockname()[1])
    cap.port_name = f"gRPC port {bound}"
    return server, bound, cap


def _goaway_refusal() -> bytes:
    """What a gRPC connection past the cap is told before it is closed: the server's preface (an
    empty SETTINGS frame) and GOAWAY ENHANCE_YOUR_CALM for stream 0, no stream processed, so a
    client retries elsewhere or later rather than reading a bare close as a network fault."""
    settings_frame = struct.pack("!I", 0)[1:] + struct.pack("!BBI", 0x4, 0, 0)
    debug = b"connection limit"
    payload = struct.pack("!II", 0, 0xB) + debug
    goaway_frame = struct.pack("!I", len(payload))[1:] + struct.pack("!BBI", 0x7, 0, 0) + payload
    return settings_frame + goaway_frame


_GOAWAY_REFUSAL = _goaway_refusal()


def _bind(host: str, port: int, cap: ConnectionCap, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket that keeps the process's reserved descriptors out of its connections'
    reach (`ReservingListener`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = ReservingListener(family, socket.SOCK_STREAM, 0, cap)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        # The processes of one `serve --processes N` share the port; the kernel spreads connections.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
