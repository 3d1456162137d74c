"""The embedded segment store's TCP listener and its lifecycle.

Invariant: close() stops accepting, answers every parked tail read, then ends every connection
(deleting their unmerged transient segments) before it returns; a failing connection never
takes the listener down. At most `max_connections` are open at once (one more is closed at
once, the refusals logged once per interval with a count); a sweep closes the connections past
their hello, idle or frame deadline (limits.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from app.metrics.record import StoreTraffic
from app.observability.throttled_log import ThrottledWarning
from app.segmentstore import storage as st
from app.segmentstore.server.connection import Connection, PortShare
from app.segmentstore.server.handlers import Handlers
from app.segmentstore.server.limits import ConnectionLimits
from app.segmentstore.server.ownership import ContainerOwnership
from app.segmentstore.server.peers import StorePeers
from app.segmentstore.server.read_ahead import DEFAULT_READ_AHEAD_BYTES, ReadAhead
from app.segmentstore.server.read_index import DEFAULT_SEGMENT_BYTES, DEFAULT_TOTAL_BYTES, ReadIndex
from app.segmentstore.server.tails import Tails
from app.segmentstore.server.tokens import TokenGate
from app.waiting import bounded

log = logging.getLogger(__name__)

# How long close() lets woken tail reads write their replies.
CLOSE_ANSWER_TIMEOUT_S: Final = 5.0
# How long a new connection to a TLS listener has to complete its handshake.
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
# The sweep looks at every connection this often (at most), a fraction of the shortest deadline.
SWEEP_INTERVAL_S: Final = 1.0


class SegmentStoreServer:
    def __init__(
        self,
        storage: st.SegmentStorage,
        tail_wait_s: float,
        on_close: Callable[[], Awaitable[None]] | None = None,
        ownership: ContainerOwnership | None = None,
        tokens: TokenGate | None = None,
        tls: ssl.SSLContext | None = None,
        peers: StorePeers | None = None,
        limits: ConnectionLimits | None = None,
        read_index: ReadIndex | None = None,
        tail_linger_s: float = 0.0,
        read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
    ) -> None:
        self._storage = storage
        self._share = PortShare.of(limits if limits is not None else ConnectionLimits())
        self._open = 0
        self._refusals = ThrottledWarning(log, "segment store connection refused")
        self._sweep: asyncio.TimerHandle | None = None
        # With authentication on: every request carrying a delegation token is checked.
        self._tokens = tokens
        self._tls = tls
        self._tail_wait_s = tail_wait_s
        self._on_close = on_close
        # None: a store of its own with no cluster (tests of the protocol) serves every segment.
        self.ownership = ownership
        # With peers (the other stores behind this port), changes made here wake their parked
        # reads and theirs wake ours.
        self._peers = peers
        index = (
            read_index if read_index is not None else ReadIndex(DEFAULT_SEGMENT_BYTES, DEFAULT_TOTAL_BYTES)
        )
        self._tails = Tails(
            peers.changed if peers is not None else None, index, tail_linger_s, ReadAhead(read_ahead_bytes)
        )
        if peers is not None:
            peers.on_changed(self._tails.heard)
        self._handlers = Handlers(storage, self._tails)
        self._connections: dict[asyncio.Task[None], Connection] = {}
        # One per listening socket (a host name may resolve to an IPv4 and an IPv6 address).
        self._servers: list[asyncio.Server] = []
        self._address: tuple[str, int] = ("", 0)
        self._closed = False
        self._traffic: StoreTraffic | None = None

    @classmethod
    async def start(
        cls,
        storage: st.SegmentStorage,
        host: str,
        port: int,
        *,
        tail_wait_s: float = 20.0,
        on_close: Callable[[], Awaitable[None]] | None = None,
        ownership: ContainerOwnership | None = None,
        tokens: TokenGate | None = None,
        tls: ssl.SSLContext | None = None,
        reuse_port: bool = False,
        peers: StorePeers | None = None,
        limits: ConnectionLimits | None = None,
        sockets: Sequence[socket.socket] = (),
        read_index: ReadIndex | None = None,
        tail_linger_s: float = 0.0,
        read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES,
    ) -> SegmentStoreServer:
        """Listens on host:port (port 0: any free port); `tail_wait_s` bounds a tail read's wait,
        below the Rust client's 30 s request timeout. `on_close` runs last in close() (the
        storage's own background work, e.g. its auto-scale reports, stops with the store). With
        `ownership`, only the containers it gives this store are served (WrongHost for the others).
        With `tokens`, delegation tokens are checked (authentication on). With `tls`, every
        connection must complete a TLS handshake before its first command. `reuse_port`: bind with
        SO_REUSEPORT (the port is reserved by the supervisor of `serve --processes N`). `peers`: the
        other stores of that run, behind the same port (started by the caller). `limits`: what
        the port's connections may hold (ConnectionLimits' defaults without it). `sockets`: bound
        sockets to listen on instead of binding host:port (the caller's own, e.g. a listener that
        keeps descriptors in reserve at accept()); they are the server's from then on.
        `read_index`: the recent bytes kept in memory (read_index.py; its default budgets without
        it). `tail_linger_s`: how long a tail read woken by an append waits for the writer's next
        append (tails.py; 0: not at all). `read_ahead_bytes`: what catch-up reads may have
        fetched ahead of them (read_ahead.py; 0: nothing)."""
        self = cls(
            storage,
            tail_wait_s,
            on_close,
            ownership,
            tokens,
            tls,
            peers,
            limits,
            read_index,
            tail_linger_s,
            read_ahead_bytes,
        )
        try:
            if sockets:
                for sock in sockets:
                    self._servers.append(await asyncio.start_server(self._accept, sock=sock))
            else:
                self._servers.append(
                    await asyncio.start_server(self._accept, host, port, reuse_port=reuse_port or None)
                )
        except BaseException:
            for server in self._servers:
                server.close()
            for sock in sockets:
                sock.close()
            raise
        sockname = self._servers[0].sockets[0].getsockname()
        self._address = (str(sockname[0]), int(sockname[1]))
        log.info("segment store listening on %s:%d%s", *self._address, " (TLS)" if tls else "")
        self._schedule_sweep()
        return self

    def _schedule_sweep(self) -> None:
        limits = self._share.limits
        shortest = min(limits.hello_timeout_s, limits.idle_timeout_s, limits.frame_deadline_s)
        interval = min(SWEEP_INTERVAL_S, max(0.05, shortest / 4))
        self._sweep = asyncio.get_running_loop().call_later(interval, self._sweep_connections)

    def _sweep_connections(self) -> None:
        # A callback, not a task: it holds nothing and cannot die half-way (rescheduled first).
        self._schedule_sweep()
        now = time.monotonic()
        for connection in list(self._connections.values()):
            reason = connection.overdue(now)
            if reason is not None:
                connection.abort(reason)

    def _store_traffic(self) -> StoreTraffic:
        # Made at the first connection: the label is the address, known once listening.
        if self._traffic is None:
            self._traffic = StoreTraffic(f"{self._address[0]}:{self._address[1]}")
        return self._traffic

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    def parked_reads(self) -> int:
        """Reads parked at a segment's tail now, on every connection."""
        return self._tails.waiting()

    def read_index_span(self, segment: str) -> tuple[int, int] | None:
        """The range of `segment`'s bytes the read index holds, or None."""
        return self._tails.index.span(segment)

    def live_transients(self) -> set[str]:
        """The transient segments this store's open connections created and still hold."""
        return {name for c in self._connections.values() for name in c.transient_segments()}

    def disown(self, containers: frozenset[int]) -> None:
        """Containers this store lost: reads parked on their segments answer WrongHost now (the
        new owner's appends would never wake them); their writers get WrongHost at their next
        request, as every request of a container not owned does."""
        ownership = self.ownership
        if ownership is None or not containers:
            return
        for segment in self._tails.index.segments():
            # Another store may append to them now: what this one kept would go stale.
            if ownership.container_of(segment) in containers:
                self._tails.drop_cached(segment)
        for connection in self._connections.values():
            connection.disown(lambda segment: ownership.container_of(segment) in containers)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
        self._refusals.close()
        for server in self._servers:
            server.close()
        self._tails.close()
        connections = dict(self._connections)
        # Woken reads answer at once; the bound only covers peers that stopped reading their
        # socket (their replies cannot drain), whose connections are then ended regardless.
        answered = asyncio.gather(
            *(c.answer_parked_reads() for c in connections.values()), return_exceptions=True
        )
        with contextlib.suppress(TimeoutError):
            await bounded(answered, CLOSE_ANSWER_TIMEOUT_S)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        if self._on_close is not None:
            await self._on_close()
        self._share.closures.close()
        log.info("segment store on %s:%d closed", *self._address)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if self._closed or task is None:
            writer.close()
            return
        limit = self._share.limits.max_connections
        if self._open >= limit:
            self._refusals.record(
                f"{self._open} connections open, the port's cap (--segment-store-max-connections)"
            )
            writer.transport.abort()
            return
        self._open += 1
        try:
            await self._serve(task, reader, writer)
        finally:
            self._open -= 1

    async def _serve(
        self, task: asyncio.Task[None], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._tls is not None and not await self._handshake(writer):
            return
        connection = Connection(
            reader,
            writer,
            self._storage,
            self._tails,
            self._handlers,
            self._tail_wait_s,
            self.ownership,
            self._tokens,
            self._store_traffic(),
            self._peers.index if self._peers is not None else None,
            self._share,
        )
        self._connections[task] = connection
        try:
            await connection.run()
        except asyncio.CancelledError:
            # close() cancels the connections it ends; asyncio's stream callback would report a
            # cancelled handler task as an error, so the task ends normally instead.
            if not self._closed:
                raise
        finally:
            self._connections.pop(task, None)

    async def _handshake(self, writer: asyncio.StreamWriter) -> bool:
        """Upgrades a new connection to TLS; a peer that cannot (a plain client, an untrusted or
        outdated one) is dropped quietly: it is the peer's mistake, not the store's."""
        assert self._tls is not None
        try:
            await writer.start_tls(self._tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("TLS handshake with %s failed: %r", writer.get_extra_info("peername"), exc)
            writer.close()
            return False
        return True
