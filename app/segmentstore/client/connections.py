"""TCP connections to segment stores, pooled per host, one request (or one pipelined batch) in
flight on each.

Invariants: a connection says Hello before anything else and is used only after the server's
Hello accepts our version; a connection goes back to the pool only after a whole exchange ended
with the reply to every request it carried (same request ids, in any order, as Pravega's store
answers in completion order), so a connection that timed out, lost
its peer, was cancelled mid-request or read anything unexpected is closed, never reused. Request
ids come from one process-wide counter, so no two requests of this process share one; they are
never the caller's request id, which every line logged about them carries beside them instead
(tracing.py says why, after Pravega's controller).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Final, TypeVar

from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.segmentstore.client import tracing
from app.segmentstore.client.replies import describe
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import MalformedCommand, encode, read_command

UnavailableT = TypeVar("UnavailableT", bound=StoreUnavailable)
_T = TypeVar("_T")

# Starts at 1 like the Rust client's: the server echoes ids, 0 is Hello's and -1 KeepAlive's.
_request_ids: Final = itertools.count(1)


def next_request_id() -> int:
    return next(_request_ids)


def _at(exc: UnavailableT, where: str, cause: BaseException | None = None) -> UnavailableT:
    """`exc` with the store's address (and the OS's words, which name it too) in a note: the API
    logs notes under an error id and sends callers the message only, so no host or port of a
    segment store reaches a client or a REST body (as the database's never do)."""
    exc.add_note(f"segment store {where}" + (f": {cause}" if cause is not None and str(cause) else ""))
    return exc


class ConnectionLost(StoreUnavailable):
    """The peer closed or reset the connection (as opposed to a timeout or a bad reply)."""


class Connection:
    """One TCP connection that has completed the Hello exchange."""

    def __init__(
        self, endpoint: HostAddress, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.endpoint = endpoint
        self._reader = reader
        self._writer = writer
        self.broken = False

    @classmethod
    async def open(
        cls, endpoint: HostAddress, timeout_s: float, tls: ssl.SSLContext | None = None
    ) -> Connection:
        """Connects and says Hello; with `tls`, over TLS, verifying the store's certificate for
        the host name (or address) the container map gives it."""
        where = str(endpoint)
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(timeout_s):
                if tls is None:
                    reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
                else:
                    reader, writer = await asyncio.open_connection(
                        endpoint.host, endpoint.port, ssl=tls, server_hostname=endpoint.host
                    )
                writer.write(encode(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION)))
                await writer.drain()
                reply = await read_command(reader)
        except TimeoutError:
            _close(writer)
            raise _unreachable(
                StoreUnavailable(f"segment store: no connection and Hello within {timeout_s} s"), where
            ) from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            _close(writer)
            raise _unreachable(
                ConnectionLost(f"segment store: cannot connect: {type(exc).__name__}"), where, exc
            ) from exc
        except MalformedCommand as exc:
            _close(writer)
            raise _unreachable(
                StoreUnavailable(f"segment store: malformed reply to Hello: {exc}"), where
            ) from exc
        except BaseException:
            _close(writer)
            raise
        if not isinstance(reply, wc.Hello) or not reply.low_version <= wc.WIRE_VERSION <= reply.high_version:
            _close(writer)
            raise _unreachable(
                StoreUnavailable(
                    f"segment store: answered our Hello (version {wc.WIRE_VERSION}) with {reply}"
                ),
                where,
            )
        return cls(endpoint, reader, writer)

    async def request(self, command: wc.Command, timeout_s: float) -> wc.Command:
        """Sends `command` and returns the reply carrying its request id. Any failure marks the
        connection broken (and closes it) before raising StoreUnavailable."""
        expected = getattr(command, "request_id", None)
        where = str(self.endpoint)
        name = type(command).__name__
        try:
            frame = encode(command)
        except Exception:
            self.close()
            raise
        with self._spoilt_on_failure(name, timeout_s, [] if expected is None else [expected]):
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                reply = await read_command(self._reader)
            got = getattr(reply, "request_id", None)
            if got != expected:
                raise _at(
                    StoreUnavailable(
                        f"segment store: the reply to {name} (request {expected}) was "
                        f"{type(reply).__name__} for request {got}"
                    ),
                    where,
                )
        tracing.answered(where, describe(command), expected, type(reply).__name__)
        return reply

    async def request_many(self, commands: Sequence[wc.Command], timeout_s: float) -> list[wc.Command]:
        """Sends `commands` pipelined (one write) and returns their replies in the order of
        `commands`, matched by request id. Any failure closes the connection before raising."""
        where = str(self.endpoint)
        name = type(commands[0]).__name__ if commands else "nothing"
        wire_ids = [_wire_id(command) for command in commands]
        order: dict[int | None, int] = {wire_id: index for index, wire_id in enumerate(wire_ids)}
        if len(order) != len(commands):
            raise ValueError("pipelined commands need distinct request ids")
        try:
            frame = b"".join(encode(command) for command in commands)
        except Exception:
            self.close()
            raise
        replies: list[wc.Command | None] = [None] * len(commands)
        with self._spoilt_on_failure(f"{len(commands)} {name}s", timeout_s, wire_ids):
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                for _ in commands:
                    reply = await read_command(self._reader)
                    index = order.pop(getattr(reply, "request_id", None), -1)
                    if index < 0:
                        raise _at(
                            StoreUnavailable(
                                f"segment store: a reply to pipelined {name}s was {type(reply).__name__} "
                                f"for request {getattr(reply, 'request_id', None)}"
                            ),
                            where,
                        )
                    replies[index] = reply
        answered = [reply for reply in replies if reply is not None]
        for command, wire_id, reply in zip(commands, wire_ids, answered, strict=True):
            tracing.answered(where, describe(command), wire_id, type(reply).__name__)
        return answered

    @contextlib.contextmanager
    def _spoilt_on_failure(self, what: str, timeout_s: float, wire_ids: Sequence[int]) -> Iterator[None]:
        """An exchange's failures as the store's errors, each logged with the commands' wire ids.
        Any failure, a cancellation included, closes the connection before raising: a reply may
        still arrive on it, out of step."""
        where = str(self.endpoint)

        def spoilt(failure: StoreUnavailable, cause: BaseException | None = None) -> StoreUnavailable:
            self.close()
            tracing.failed(where, wire_ids, _at(failure, where, cause))
            return failure

        try:
            yield
        except TimeoutError:
            silent = StoreUnavailable(f"segment store: no reply to {what} within {timeout_s} s")
            raise spoilt(silent) from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            lost = ConnectionLost(f"segment store: connection lost during {what}: {type(exc).__name__}")
            raise spoilt(lost, exc) from exc
        except MalformedCommand as exc:
            raise spoilt(StoreUnavailable(f"segment store: malformed reply to {what}: {exc}")) from exc
        except StoreUnavailable as exc:  # a reply to another request, noted where it was raised
            self.close()
            tracing.failed(where, wire_ids, exc)
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.broken = True
        _close(self._writer)

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


def _wire_id(command: wc.Command) -> int:
    wire_id = getattr(command, "request_id", None)
    if not isinstance(wire_id, int):
        raise ValueError(f"pipelined commands need distinct request ids, {type(command).__name__} has none")
    return wire_id


def _unreachable(exc: UnavailableT, where: str, cause: BaseException | None = None) -> UnavailableT:
    """`_at`, logged: no command reached the store."""
    failure = _at(exc, where, cause)
    tracing.failed(where, [], failure)
    return failure


def _close(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None:
        writer.close()


class ConnectionPool:
    """Idle connections per endpoint, and a bound on how many are open to one endpoint at once.

    `request` borrows an idle connection (or opens one), and returns it only when the exchange
    ended well. A reused connection that the peer had closed meanwhile (it restarted, or dropped
    an idle client) costs one retry on a new connection, and the other idle ones of that endpoint
    are dropped with it: they are most likely dead too.
    """

    def __init__(
        self, *, timeout_s: float, max_per_endpoint: int = 8, tls: ssl.SSLContext | None = None
    ) -> None:
        if max_per_endpoint < 1:
            raise ValueError("max_per_endpoint must be at least 1")
        self.timeout_s = timeout_s
        self._tls = tls
        self._max = max_per_endpoint
        self._idle: dict[HostAddress, list[Connection]] = {}
        self._slots: dict[HostAddress, asyncio.Semaphore] = {}
        self._closed = False

    def idle_count(self, endpoint: HostAddress) -> int:
        return len(self._idle.get(endpoint, ()))

    async def request(self, endpoint: HostAddress, command: wc.Command) -> wc.Command:
        return await self._on_pooled(endpoint, lambda c: c.request(command, self.timeout_s))

    async def request_many(self, endpoint: HostAddress, commands: Sequence[wc.Command]) -> list[wc.Command]:
        """`commands` pipelined on one pooled connection: their replies, in their order. Costs
        one send each way instead of one per command, and a store that runs them at once groups
        their storage writes. Retried once on a new connection like `request`."""
        return await self._on_pooled(endpoint, lambda c: c.request_many(commands, self.timeout_s))

    async def _on_pooled(self, endpoint: HostAddress, exchange: Callable[[Connection], Awaitable[_T]]) -> _T:
        """`exchange` on an idle connection, or on a new one when there is none or the idle one
        turns out to be closed (a store restarted since: its pooled connections are all dead)."""
        async with self._slot(endpoint):
            idle = self._idle.get(endpoint)
            if idle:
                connection = idle.pop()
                try:
                    answer = await exchange(connection)
                except ConnectionLost:
                    self._drop_idle(endpoint)
                else:
                    self._release(connection)
                    return answer
            connection = await self._open(endpoint)
            answer = await exchange(connection)
            self._release(connection)
            return answer

    @contextlib.asynccontextmanager
    async def dedicated(self, endpoint: HostAddress) -> AsyncIterator[Connection]:
        """A new connection of one's own (an append session), closed when the block ends."""
        async with self._slot(endpoint):
            connection = await self._open(endpoint)
            try:
                yield connection
            finally:
                connection.close()
                await connection.wait_closed()

    async def close(self) -> None:
        self._closed = True
        idle = [c for connections in self._idle.values() for c in connections]
        self._idle.clear()
        for connection in idle:
            connection.close()
        for connection in idle:
            await connection.wait_closed()

    @contextlib.asynccontextmanager
    async def _slot(self, endpoint: HostAddress) -> AsyncIterator[None]:
        if self._closed:
            raise StoreUnavailable("the segment-store client is closed")
        slots = self._slots.get(endpoint)
        if slots is None:
            slots = self._slots[endpoint] = asyncio.Semaphore(self._max)
        async with slots:
            yield

    async def _open(self, endpoint: HostAddress) -> Connection:
        return await Connection.open(endpoint, self.timeout_s, self._tls)

    def _release(self, connection: Connection) -> None:
        if connection.broken or self._closed:
            connection.close()
            return
        self._idle.setdefault(connection.endpoint, []).append(connection)

    def _drop_idle(self, endpoint: HostAddress) -> None:
        for connection in self._idle.pop(endpoint, []):
            connection.close()
