"""Reply bytes the gRPC server holds for clients that do not take them: HTTP/2 flow control lets a
client advertise a zero window and never send WINDOW_UPDATE, and TCP lets it never read its socket
(CVE-2019-9517); either way a finished reply stays in the server's memory for as long as the
connection lasts, and so do the next hundred on the same connection, and on the next connection.

Bounds:
- a connection's unsent bytes (replies waiting for flow-control window or for the socket, plus its
  write buffer) at most `per_connection`: past it the connection is cut off;
- all connections' unsent bytes at most `in_all`: past it the connections that have gone longest
  without sending are cut off until the rest fit;
- a stream that has sent nothing for `stall_s` while it had a reply to send is reset (RST_STREAM
  CANCEL, its handler cancelled), and a connection whose socket has not drained for `stall_s` is
  cut off (Tomcat's streamWriteTimeout and Go's WriteByteTimeout do the same).

A reply counts from the moment grpclib starts sending it until its last byte is in the write buffer
(its bytes are in memory all that time); the write buffer counts as asyncio reports it.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpclib.protocol import Connection, Stream
from h2.errors import ErrorCodes
from h2.exceptions import H2Error

# The least a connection must hold unsent to be cut off for the process's budget.
EVICTION_FLOOR_BYTES = 64 * 1024
# How soon the memory of dropped replies is collected: an attacker cutting connections off and
# opening new ones drops a few MB every tenth of a second.
COLLECT_AFTER_S = 0.1


def _trim_heap() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: nothing to trim
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


@dataclass
class _Send:
    size: int
    sent: int
    progress_at: float


class UnsentBudget:
    """The server's unsent bytes over all its connections, and the sweep that enforces the
    bounds no single write would notice (a stall is the absence of writes)."""

    def __init__(
        self, per_connection: int, in_all: int, stall_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_connection = per_connection
        self.in_all = in_all
        self.stall_s = stall_s
        self.clock = clock
        self.held = 0
        # Write buffers as of the last sweep: summed there, not on every reply.
        self.buffered = 0
        self._connections: set[ConnectionSends] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._collection: asyncio.TimerHandle | None = None

    @property
    def sweep_interval_s(self) -> float:
        return min(1.0, self.stall_s / 4)

    def attach(self, sends: ConnectionSends) -> None:
        self._connections.add(sends)
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.sweep_interval_s, self._swept)

    def detach(self, sends: ConnectionSends) -> None:
        self._connections.discard(sends)

    def over(self) -> bool:
        return self.held + self.buffered > self.in_all

    def evict(self) -> None:
        """Cuts off the connections that have gone longest without sending until the rest fit;
        never one holding less than EVICTION_FLOOR_BYTES (a client in the middle of taking a small
        reply is not what fills the budget)."""
        # Counted afresh: the last sweep's sum still holds the buffers of connections cut off since,
        # and would blame whichever connection happens to be sending now.
        self.buffered = sum(sends.buffered() for sends in self._connections)
        excess = self.held + self.buffered - self.in_all
        for sends in sorted(self._connections, key=lambda s: s.progress_at):
            if excess <= 0:
                return
            unsent = sends.unsent()
            if unsent >= EVICTION_FLOOR_BYTES:
                excess -= unsent
                sends.cut_off(f"the server holds over {self.in_all} bytes unsent")

    def release(self) -> None:
        """Replies were dropped (a connection cut off, a stream reset): their memory is given back
        shortly, once for all dropped meanwhile."""
        if self._collection is None:
            self._collection = asyncio.get_running_loop().call_later(COLLECT_AFTER_S, self._collect)

    def _collect(self) -> None:
        self._collection = None
        # A handler cancelled with its reply unsent is a reference cycle (task, frame, exception,
        # stream) that lived long enough to reach the oldest generation: only a full collection
        # frees it, and without one the replies of the connections cut off stay in memory for as
        # long as the heap takes to grow by a quarter.
        gc.collect()
        # The replies were malloc'ed in blocks above its mmap threshold, which glibc raises as they
        # are freed: freed, they stay in its heap, resident, until trimmed (+120 to +150 MB kept
        # after an attack; +17 MB with the trim).
        _trim_heap()

    def _swept(self) -> None:
        self._sweep = None
        now = self.clock()
        buffered = 0
        for sends in list(self._connections):
            sends.sweep(now)
            buffered += sends.buffered()
        self.buffered = buffered
        if self.over():
            self.evict()
        if self._connections:
            self._sweep = asyncio.get_running_loop().call_later(self.sweep_interval_s, self._swept)


class ConnectionSends:
    """One connection's replies in the middle of being sent, and its write buffer."""

    def __init__(
        self,
        budget: UnsentBudget,
        connection: Connection,
        cut_off: Callable[[str], None],
        reset: Callable[[Stream], None],
    ) -> None:
        self._budget = budget
        self._connection = connection
        self._transport: asyncio.Transport = connection._transport
        self._cut_off = cut_off
        self._reset = reset
        self._sending: dict[Stream, _Send] = {}
        self.held = 0
        self.progress_at = budget.clock()
        self._paused_since: float | None = None
        self.detached = False
        # Told when a stream's reply starts to be sent, and when a reply has been handed whole to
        # the socket (app/api/grpc/h2_first_calls.py).
        self.on_reply: Callable[[Stream], None] = lambda stream: None
        self.on_taken: Callable[[], None] = lambda: None
        budget.attach(self)

    def buffered(self) -> int:
        return 0 if self._transport.is_closing() else self._transport.get_write_buffer_size()

    def unsent(self) -> int:
        return self.held + self.buffered()

    def backed_up(self) -> bool:
        """Whether its client is not taking its replies: its socket is not draining, or it holds
        a quarter of its budget unsent. New calls are refused meanwhile, so that a stalled client
        cannot have the server build (and hold) a hundred replies at once."""
        return self._paused_since is not None or self.unsent() >= self._budget.per_connection // 4

    def begin(self, stream: Stream, size: int) -> bool:
        """Counts a reply about to be sent; False when that cut the connection off."""
        now = self._budget.clock()
        if not self._sending:
            self.progress_at = now
        self._sending[stream] = _Send(size, stream.data_sent, now)
        self.held += size
        if self.detached:
            return False
        self._budget.held += size
        if self.unsent() > self._budget.per_connection:
            self.cut_off(f"over {self._budget.per_connection} bytes unsent on one connection")
        elif self._budget.over():
            self._budget.evict()
        return not self.detached

    def end(self, stream: Stream) -> None:
        send = self._sending.pop(stream, None)
        if send is None:
            return
        self.held -= send.size
        self.progress_at = self._budget.clock()
        if not self.detached:
            self._budget.held -= send.size

    def paused(self, paused: bool) -> None:
        self._paused_since = self._budget.clock() if paused else None

    def sweep(self, now: float) -> None:
        stall_s = self._budget.stall_s
        if self._paused_since is not None and now - self._paused_since >= stall_s:
            self.cut_off(f"its socket took nothing for {stall_s:g} s")
            return
        if self.unsent() > self._budget.per_connection:
            self.cut_off(f"over {self._budget.per_connection} bytes unsent on one connection")
            return
        for stream, send in list(self._sending.items()):
            if stream.data_sent != send.sent:
                send.sent, send.progress_at = stream.data_sent, now
                self.progress_at = now
            elif now - send.progress_at >= stall_s:
                self._budget.release()
                self.end(stream)
                self._reset(stream)

    def cut_off(self, reason: str) -> None:
        self._budget.release()
        self.detach()
        self._cut_off(reason)
        # A peer that does not read would hold the GOAWAY and the write buffer for ever.
        if self._transport.get_write_buffer_size():
            self._transport.abort()

    def detach(self) -> None:
        if self.detached:
            return
        self.detached = True
        self._budget.held -= self.held
        self._budget.detach(self)


class WatchedStream(Stream):
    """grpclib's stream, each reply counted against its connection's unsent bytes while sent."""

    sends: ConnectionSends

    async def send_data(self, data: bytes, end_stream: bool = False) -> None:
        self.sends.on_reply(self)
        if not self.sends.begin(self, len(data)):
            self.sends.end(self)
            # The cut-off cancelled this handler's task: let it end at this await, as it would
            # for a client's reset.
            await asyncio.sleep(0)
            raise asyncio.CancelledError
        try:
            await super().send_data(data, end_stream)
        finally:
            self.sends.end(self)
        self.sends.on_taken()


def watch_streams(connection: Connection, sends: ConnectionSends) -> None:
    """Makes every stream `connection` creates from now on a WatchedStream counted in `sends`."""

    def create_stream(*, stream_id: int | None = None, wrapper: Any = None) -> Stream:
        stream = WatchedStream(
            connection, connection._connection, connection._transport, stream_id=stream_id, wrapper=wrapper
        )
        stream.sends = sends
        return stream

    connection.__dict__["create_stream"] = create_stream


def reset_quietly(connection: Connection, stream: Stream, error_code: ErrorCodes) -> bool:
    """Resets `stream` in h2 and flushes; False when h2 had already closed it."""
    assert stream.id is not None
    try:
        connection._connection.reset_stream(stream.id, error_code=error_code)
    except H2Error:
        return False
    connection.flush()
    return True
