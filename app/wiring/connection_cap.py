"""A cap on the connections one listening port holds, and a reserve of file descriptors no client
connection may take, so a flood of idle connections can neither exhaust the process's descriptors
(the database pool could then not reconnect: readiness, leadership and buckets lost) nor crowd out
each other port. A connection past either bound is refused at once (the port's refusal, e.g. an
HTTP 503, then closed) before the server's protocol sees it; refusals are logged once per interval
with a count."""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable

from app.observability.throttled_log import ThrottledWarning

log = logging.getLogger("pgcontroller.connections")


def descriptor_ceiling(fd_reserve: int) -> int:
    """The lowest descriptor number a client connection may not take: the process's soft
    RLIMIT_NOFILE less `fd_reserve`."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(0, soft - fd_reserve)


class ConnectionCap:
    """One per listening port. `refusal` is written to a refused connection before it is closed,
    so a client sees why rather than a bare close."""

    def __init__(self, port_name: str, max_connections: int, fd_ceiling: int, refusal: bytes = b"") -> None:
        self.max_connections = max_connections
        self.refusal = refusal
        self.fd_ceiling = fd_ceiling
        self.open = 0
        self._refusals = ThrottledWarning(log, f"{port_name}: connection refused")

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        if self.open >= self.max_connections:
            self._refusals.record(f"{self.open} connections open, the cap")
            return False
        sock = transport.get_extra_info("socket")
        descriptor = sock.fileno() if sock is not None else -1
        # The kernel hands out the lowest free descriptor: a connection numbered n means the n
        # below it are all taken, so past the ceiling fewer than the reserve are left.
        if descriptor >= self.fd_ceiling:
            self._refusals.record(f"descriptor {descriptor}, in the reserve kept for the database and logs")
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def close(self) -> None:
        self._refusals.close()


class _Capped(asyncio.Protocol):
    """The server's protocol, created only for an admitted connection."""

    def __init__(self, make_inner: Callable[[], asyncio.Protocol], cap: ConnectionCap) -> None:
        self._make_inner = make_inner
        self._cap = cap
        self._inner: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._cap.admit(transport):
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
