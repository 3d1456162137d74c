"""An aiohttp application listening on a host and port: over TLS when the settings ask for it,
the runner cleaned up when the port cannot be bound, the bound port answered (0 asks the OS).
The REST port of `serve` and the metrics port of `segment-store` both start this way.

Invariant: a connection that has not sent a complete request's headers within the idle timeout of
opening or of its last response is closed (aiohttp's keep-alive timer covers both the idle wait and
a request trickling in, slowloris); a request whose body has not all arrived within the body
timeout of its headers is answered 408 and its connection closed (aiohttp has no such timer: a
handler reading a body that never ends waited for ever); the port holds at most its cap of
connections and never takes the process's reserved descriptors (app/wiring/connection_cap.py)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Middleware

from app.api.rest.http import error_response
from app.security.tls import ALPN_REST, server_context
from app.settings import Settings
from app.wiring.connection_cap import ConnectionCap, capped, descriptor_ceiling, reserving_listeners

_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _BodyTimedOut(TimeoutError):
    """Raised in a handler's read of a body past its deadline. A TimeoutError, so that aiohttp's
    draining of an unread body after a response (its lingering close) takes it as the end of the
    drain rather than as a handler's failure."""


def _cut_short(payload: StreamReader) -> None:
    if not payload.is_eof():
        payload.set_exception(_BodyTimedOut())


def _body_deadline(timeout_s: float) -> Middleware:
    @web.middleware
    async def body_deadline(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        payload = request.content
        if payload.is_eof():  # no body, or all of it arrived with the headers
            return await handler(request)
        timer = asyncio.get_running_loop().call_later(timeout_s, _cut_short, payload)
        try:
            return await handler(request)
        except _BodyTimedOut:
            response = error_response(
                408, f"the request body did not arrive within {timeout_s:g} s (--rest-body-timeout-s)"
            )
            # The rest of the body may never come: the connection cannot carry another request.
            response.force_close()
            return response
        finally:
            timer.cancel()

    return body_deadline


class _CappedSite(web.BaseSite):
    """aiohttp's TCPSite with every connection admitted through a ConnectionCap first: one server
    per address the host names, as loop.create_server binds them."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        cap: ConnectionCap,
        *,
        ssl_context: ssl.SSLContext | None,
        reuse_port: bool,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._cap = cap
        self._reuse_port = reuse_port
        self._others: list[asyncio.Server] = []

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # set by runner.setup(), which listen_http awaits first
        loop = asyncio.get_running_loop()
        listeners = await reserving_listeners(self._host, self._port, self._cap, reuse_port=self._reuse_port)
        servers: list[asyncio.Server] = []
        try:
            for sock in listeners:
                servers.append(
                    await loop.create_server(
                        capped(server, self._cap), sock=sock, ssl=self._ssl_context, backlog=self._backlog
                    )
                )
        except BaseException:
            for started in servers:
                started.close()
            for sock in listeners:
                sock.close()
            raise
        # aiohttp reads the first for the runner's addresses and closes it on stop.
        self._server, self._others = servers[0], servers[1:]

    async def stop(self) -> None:
        self._cap.close()
        for other in self._others:
            other.close()
        await super().stop()


async def listen_http(
    app: web.Application, settings: Settings, host: str, port: int
) -> tuple[web.AppRunner, int]:
    """The started runner and its bound port; OSError (nothing left open) when the port is taken."""
    tls = server_context(settings, ALPN_REST)
    # Innermost, so the 408 passes through the access log and the error middlewares as any answer.
    app.middlewares.append(_body_deadline(settings.rest_body_timeout_s))
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, keepalive_timeout=settings.rest_idle_timeout_s
    )
    await runner.setup()
    cap = ConnectionCap(
        f"HTTP port {port}",
        settings.rest_max_connections,
        descriptor_ceiling(settings.fd_reserve),
        refusal=_REFUSAL,
        encrypted=tls is not None,
    )
    try:
        site = _CappedSite(runner, host, port, cap, ssl_context=tls, reuse_port=settings.reuse_port)
        await site.start()
    except BaseException:
        cap.close()
        await runner.cleanup()
        raise
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    cap.port_name = f"HTTP port {bound}"
    return runner, bound
