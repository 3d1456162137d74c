"""A cap on the connections one listening port holds, and a reserve of file descriptors no client
connection may take, so a flood of idle connections can neither exhaust the process's descriptors
(the database pool could then not reconnect: readiness, leadership and buckets lost) nor crowd out
each other port. A connection past either bound is refused at once (the port's refusal, e.g. an
HTTP 503, then closed) before the server's protocol sees it; refusals are logged once per interval
with a count.

The reserve is kept at accept() itself (`ReservingListener`): asyncio accepts up to the backlog
in one loop turn and only makes the protocols turns later, so a check in the protocol would let
a burst overrun the reserve by hundreds of descriptors before the first refusal closed one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
from collections.abc import Callable

from app.observability.throttled_log import ThrottledWarning

log = logging.getLogger("pgcontroller.connections")

# Refusals one accept() call makes before it yields the loop turn (the rest wait for the next).
_REFUSALS_PER_ACCEPT = 64


def descriptor_ceiling(fd_reserve: int) -> int:
    """The lowest descriptor number a client connection may not take: the process's soft
    RLIMIT_NOFILE less `fd_reserve`."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(0, soft - fd_reserve)


class ConnectionCap:
    """One per listening port. `refusal` is written to a refused connection before it is closed,
    so a client sees why rather than a bare close. On a port under TLS (`encrypted`) a connection
    refused at accept() has no TLS session yet to carry it: it is closed bare."""

    def __init__(
        self,
        port_name: str,
        max_connections: int,
        fd_ceiling: int,
        refusal: bytes = b"",
        *,
        encrypted: bool = False,
    ) -> None:
        # Settable: a port asked for as 0 is only known once bound.
        self.port_name = port_name
        self.max_connections = max_connections
        self.fd_ceiling = fd_ceiling
        self.refusal = refusal
        self.refusal_at_accept = b"" if encrypted else refusal
        self.open = 0
        self._refusals = ThrottledWarning(log, "connection refused")

    def admits_descriptor(self, conn: socket.socket) -> bool:
        # The kernel hands out the lowest free descriptor: a connection numbered n means the n
        # below it are all taken, so past the ceiling fewer than the reserve are left.
        descriptor = conn.fileno()
        if descriptor < self.fd_ceiling:
            return True
        self._refusals.record(
            f"{self.port_name}: descriptor {descriptor}, in the reserve kept for the database and logs"
        )
        return False

    def admit(self) -> bool:
        if self.open >= self.max_connections:
            self._refusals.record(f"{self.port_name}: {self.open} connections open, the cap")
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def close(self) -> None:
        self._refusals.close()


class ReservingListener(socket.socket):
    """A listening socket whose accept() closes at once a connection that took a reserved
    descriptor; asyncio's accept loop calls it for each connection waiting."""

    __slots__ = ("cap",)

    def __init__(self, family: int, type_: int, proto: int, cap: ConnectionCap) -> None:
        super().__init__(family, type_, proto)
        self.cap = cap

    def accept(self) -> tuple[socket.socket, socket._RetAddress]:
        for _ in range(_REFUSALS_PER_ACCEPT):
            conn, address = super().accept()  # BlockingIOError once none waits: asyncio stops there
            if self.cap.admits_descriptor(conn):
                return conn, address
            _refuse(conn, self.cap.refusal_at_accept)
        raise BlockingIOError


def _refuse(conn: socket.socket, refusal: bytes) -> None:
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        if refusal:
            conn.send(refusal)
    conn.close()


class _Capped(asyncio.Protocol):
    """The server's protocol, created only for an admitted connection."""

    def __init__(self, make_inner: Callable[[], asyncio.Protocol], cap: ConnectionCap) -> None:
        self._make_inner = make_inner
        self._cap = cap
        self._inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._cap.admit():
            if self._cap.refusal and isinstance(transport, asyncio.WriteTransport):
                transport.write(self._cap.refusal)
            transport.close()
            return
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._cap.release()
            self._inner.connection_lost(exc)
            self._inner = None

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


def capped(make_inner: Callable[[], asyncio.Protocol], cap: ConnectionCap) -> Callable[[], asyncio.Protocol]:
    """A protocol factory for loop.create_server that admits a connection through `cap` first."""
    return lambda: _Capped(make_inner, cap)


async def reserving_listeners(
    host: str, port: int, cap: ConnectionCap, *, reuse_port: bool
) -> list[ReservingListener]:
    """Bound (not yet listening) sockets for every address `host` names, as loop.create_server
    would bind them (SO_REUSEADDR, IPv6 only on IPv6 addresses); OSError when one cannot bind."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    listeners: list[ReservingListener] = []
    try:
        for family, type_, proto, _name, address in dict.fromkeys(infos):
            sock = ReservingListener(family, type_, proto, cap)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.setblocking(False)
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    return listeners
