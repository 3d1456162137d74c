"""The gRPC server's socket writes, coalesced: every frame grpclib writes during one turn of the
event loop leaves in one send at the end of that turn, in the order written.

grpclib writes a reply's HEADERS, DATA and trailing HEADERS with a send each (and a WINDOW_UPDATE
before them); on loopback a send costs far more than joining the bytes, so one send per turn cuts
the server's CPU per call. Invariant: bytes leave in write order, none after close() is asked for
except those written before it (flushed first), none after abort().
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpclib.server
from grpclib.protocol import H2Protocol

from app.api.grpc.h2_first_calls import FirstCallSlots
from app.api.grpc.h2_limits import H2Limits, LimitedH2Protocol
from app.api.grpc.h2_unsent import UnsentBudget
from app.observability.throttled_log import ThrottledWarning
from app.turns import EndOfTurn

log = logging.getLogger(__name__)


class CoalescingTransport(asyncio.Transport):
    """Wraps a connection's transport: write() queues, one send per loop turn flushes the queue."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._pending: list[bytes] = []
        self._turn = EndOfTurn(self._flush)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._pending.append(bytes(data))
        self._turn.ask()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(p) for p in self._pending)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()


def _coalesced(protocol: H2Protocol) -> H2Protocol:
    made = protocol.connection_made

    def connection_made(transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.Transport):
            transport = CoalescingTransport(transport)
        made(transport)

    protocol.connection_made = connection_made  # type: ignore[method-assign]
    return protocol


class CoalescingServer(grpclib.server.Server):
    """grpclib's server, each connection's writes coalesced per loop turn and its HTTP/2 use held
    to `h2_limits` (app/api/grpc/h2_limits.py: rapid reset, PING and SETTINGS floods, header blocks,
    replies the client does not take)."""

    h2_limits = H2Limits()
    # One per server, made on its loop at the first connection: a flood of cut-off connections
    # costs a line per interval with a count.
    _cut_offs: ThrottledWarning | None = None
    # The unsent reply bytes of all its connections (app/api/grpc/h2_unsent.py), made likewise.
    _unsent: UnsentBudget | None = None
    # The calls building replies on connections that have taken none (app/api/grpc/h2_first_calls.py).
    _first_call_slots: FirstCallSlots | None = None

    def _protocol_factory(self) -> H2Protocol:
        if self._cut_offs is None:
            self._cut_offs = ThrottledWarning(log, "gRPC connection cut off (GOAWAY ENHANCE_YOUR_CALM)")
        if self._unsent is None:
            self._unsent = self.h2_limits.unsent_budget()
        if self._first_call_slots is None:
            self._first_call_slots = self.h2_limits.first_call_slots()
        inner = super()._protocol_factory()
        slots = self._first_call_slots
        return _coalesced(LimitedH2Protocol(inner, self.h2_limits, self._cut_offs, self._unsent, slots))


def limit_connections(server: grpclib.server.Server, limits: H2Limits) -> None:
    """Holds every connection `server` accepts from now on to `limits`."""
    if not isinstance(server, CoalescingServer):
        raise TypeError(f"{type(server).__name__} cannot limit its connections")
    server.h2_limits = limits
