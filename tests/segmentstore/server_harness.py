"""What the wire-server tests share: a raw client speaking the project's own codec over TCP, one
frame at a time (the fixtures starting the server are in conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode, read_command

# Long enough that no ordinary test waits it out, short enough that a test stuck at a tail fails
# fast; the long-poll tests start their own server with a much smaller wait.
TAIL_WAIT_S = 10.0
REPLY_TIMEOUT_S = 10.0

ServerFactory = Callable[..., Awaitable[SegmentStoreServer]]
Connect = Callable[..., Awaitable["Client"]]
_request_ids = itertools.count(1000)
C = TypeVar("C", bound=wc.Command)


def rid() -> int:
    return next(_request_ids)


def wid() -> int:
    return uuid.uuid4().int


def event(payload: bytes) -> bytes:
    """One event as a Rust writer frames it inside append data: type 0, length, payload."""
    return struct.pack(">ii", 0, len(payload)) + payload


class Client:
    """One TCP connection to the server; `call` sends a request and returns the next frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, address: tuple[str, int], *, hello: bool = True) -> Client:
        reader, writer = await asyncio.open_connection(*address)
        client = cls(reader, writer)
        if hello:
            reply = await client.call(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))
            assert reply == wc.Hello(15, 5)
        return client

    async def send(self, cmd: wc.Command) -> None:
        await self.send_raw(encode(cmd))

    async def send_raw(self, frame: bytes) -> None:
        self.writer.write(frame)
        await self.writer.drain()

    async def recv(self, timeout_s: float = REPLY_TIMEOUT_S) -> wc.Command:
        return await asyncio.wait_for(read_command(self.reader), timeout_s)

    async def call(self, cmd: wc.Command) -> wc.Command:
        await self.send(cmd)
        return await self.recv()

    async def expect(self, cmd: wc.Command, kind: type[C]) -> C:
        reply = await self.call(cmd)
        assert isinstance(reply, kind), reply
        return reply

    async def nothing_within(self, timeout_s: float) -> None:
        """Asserts no frame arrives (and the connection stays open) for `timeout_s`."""
        try:
            frame = await asyncio.wait_for(self.reader.read(1), timeout_s)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected bytes or end of stream: {frame!r}")

    async def closed_by_server(self) -> bool:
        """True when the server closes (reads hit end of stream) before REPLY_TIMEOUT_S; frames
        the server sent before closing are skipped."""
        try:
            while await asyncio.wait_for(self.reader.read(65536), REPLY_TIMEOUT_S):
                pass
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        return True

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()

    # --- shortcuts for the common requests ------------------------------------------------------

    async def create(self, name: str) -> None:
        await self.expect(wc.CreateSegment(rid(), name, 0, 0, ""), wc.SegmentCreated)

    async def create_table(self, name: str, key_length: int = 0) -> None:
        await self.expect(wc.CreateTableSegment(rid(), name, "", False, key_length, 0), wc.SegmentCreated)

    async def setup(self, name: str, writer_id: int) -> int:
        reply = await self.expect(wc.SetupAppend(rid(), writer_id, name, ""), wc.AppendSetup)
        return reply.last_event_number

    async def append(self, writer_id: int, data: bytes, last_event: int, num_event: int = 1) -> wc.Command:
        return await self.call(wc.AppendBlockEnd(writer_id, len(data), data, num_event, last_event, rid()))

    async def info(self, name: str) -> wc.StreamSegmentInfo:
        return await self.expect(wc.GetStreamSegmentInfo(rid(), name, ""), wc.StreamSegmentInfo)

    async def read(self, name: str, offset: int, suggested: int = 1 << 20) -> wc.Command:
        return await self.call(wc.ReadSegment(name, offset, suggested, "", rid()))
