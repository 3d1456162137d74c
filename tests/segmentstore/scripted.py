"""A scripted segment store for the client's tests: a real TCP listener on loopback that answers
Hello and then whatever the test's script says for each request (a reply, a drop, a stall)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

from app.domain.hosts import HostAddress
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode, read_command


class Action:
    """What the server does instead of replying."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


DROP: Final = Action("DROP")  # close the connection without a reply
STALL: Final = Action("STALL")  # never reply (until the server closes)

# A reply, several replies, raw bytes (a broken frame), or an action.
Answer = wc.Command | Action | list[wc.Command] | bytes
Script = Callable[[wc.Command], Answer]


@dataclass
class Received:
    connection: int
    command: wc.Command


@dataclass
class ScriptedServer:
    script: Script
    hello: wc.Command | Action = field(
        default_factory=lambda: wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION)
    )
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    address: HostAddress = field(default_factory=lambda: HostAddress("", 0))
    _server: asyncio.Server | None = None
    # Set when a client connection ended (the client closed it, or the script dropped it).
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def endpoint(self) -> HostAddress:
        return self.address

    def requests(self, kind: type[wc.Command] | None = None) -> list[wc.Command]:
        return [r.command for r in self.received if kind is None or isinstance(r.command, kind)]

    async def start(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = HostAddress(host, port)
        return self

    async def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            hello = await read_command(reader)
            assert isinstance(hello, wc.Hello), hello
            if self.hello is STALL:
                await self._closing.wait()
                return
            assert isinstance(self.hello, wc.Command)
            writer.write(encode(self.hello))
            await writer.drain()
            while True:
                command = await read_command(reader)
                self.received.append(Received(number, command))
                answer = self.script(command)
                if answer is DROP:
                    return
                if answer is STALL:
                    await self._closing.wait()
                    return
                if isinstance(answer, bytes):
                    writer.write(answer)
                else:
                    replies = answer if isinstance(answer, list) else [answer]
                    for reply in replies:
                        assert isinstance(reply, wc.Command)
                        writer.write(encode(reply))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.ended.set()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def scripted(script: Script, **kwargs: object) -> AsyncIterator[ScriptedServer]:
    server = await ScriptedServer(script, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        await server.close()


class FixedLocator:
    """Names the endpoints in turn, one per call (the last one forever); counts the calls."""

    def __init__(self, *endpoints: HostAddress) -> None:
        self.endpoints = list(endpoints)
        self.calls: list[str] = []

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        self.calls.append(qualified_name)
        return self.endpoints[min(len(self.calls), len(self.endpoints)) - 1]
