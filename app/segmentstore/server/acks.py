"""One connection's appends in flight: handed to storage as they arrive, without waiting for the
ones before them to commit, and acknowledged in the order they arrived.

A writer sends its next blocks before the last one is acknowledged; were the connection to read
its next frame only after each commit, each commit would carry one block. In flight together, a
writer's blocks join the same group commit (app/store/group_commit.py) as each other's and the
other connections'.

Invariant: appends reach storage in arrival order (each is started before the next frame is read,
and reaches the group commit before its first suspension); replies leave in that order; at most
`max_appends` appends and `max_bytes` of their data are in flight (past either, the connection
reads no further frame until the oldest is acknowledged); a failure the store cannot answer with a
reply (the database out of reach, an unexpected error) closes the connection, and nothing after it
is acknowledged.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from app.segmentstore.wire import commands as wc

# Enough for a writer's blocks in flight at full speed; bounded so a peer that never reads its
# acknowledgements cannot have the store hold more.
MAX_APPENDS_IN_FLIGHT = 256
MAX_BYTES_IN_FLIGHT = 16 * 1024 * 1024


class AckPipeline:
    def __init__(
        self,
        send: Callable[[Sequence[wc.Command]], Awaitable[None]],
        failed: Callable[[BaseException], Awaitable[None]],
        max_appends: int = MAX_APPENDS_IN_FLIGHT,
        max_bytes: int = MAX_BYTES_IN_FLIGHT,
    ) -> None:
        """`send` writes replies, in order, together; `failed` is told of an append that raised
        (it closes the connection)."""
        self._send = send
        self._failed = failed
        self._max_appends = max_appends
        self._max_bytes = max_bytes
        self._in_flight: deque[tuple[asyncio.Task[wc.Command], int]] = deque()
        self._bytes = 0
        # One sender for the connection's life, woken by each append that ends: not a task (and a
        # shield) per acknowledgement, which cost a tenth of the store's CPU per lone append.
        self._sender: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()
        self._sending = False
        self._all_sent = asyncio.Event()
        self._progress = asyncio.Event()
        self._broken = False

    def __len__(self) -> int:
        """Appends not acknowledged yet (replies being sent count as one)."""
        return len(self._in_flight) + self._sending

    async def start(
        self, storing: Coroutine[Any, Any, wc.Command], size: int
    ) -> asyncio.Task[wc.Command] | None:
        """Starts an append (`storing` yields its reply) once there is room for it; its task, or
        None when the pipeline broke first (`storing` never runs)."""
        while self._in_flight and (
            len(self._in_flight) >= self._max_appends or self._bytes + size > self._max_bytes
        ):
            self._progress.clear()
            await self._progress.wait()
        if self._broken:
            storing.close()
            return None
        task = asyncio.ensure_future(self._stored(storing))
        self._in_flight.append((task, size))
        self._bytes += size
        self._all_sent.clear()
        if self._sender is None:
            self._sender = asyncio.ensure_future(self._send_in_order())
        return task

    async def _stored(self, storing: Coroutine[Any, Any, wc.Command]) -> wc.Command:
        try:
            return await storing
        finally:
            # In the append's own last step: the sender runs after the other appends its group
            # commit ended in the same turn, and answers them together. (Answering a lone
            # append from here instead, a turn sooner, measured no faster.)
            self._ended.set()

    async def _send_in_order(self) -> None:
        in_flight = self._in_flight
        try:
            while not self._broken:
                if not in_flight or not in_flight[0][0].done():
                    self._ended.clear()
                    await self._ended.wait()
                    continue
                head = in_flight[0][0]
                if head.cancelled():
                    self._break()
                    return
                failure = head.exception()
                if failure is not None:
                    # Met after the acknowledgements before it were sent: nothing after it is.
                    self._break()
                    self._sending = True
                    try:
                        await self._failed(failure)
                    finally:
                        self._sending = False
                    return
                replies = []
                # The appends after it that ended too (a group commit ends many at once) are
                # answered with it; one that failed is met above, next round.
                while in_flight and _succeeded(in_flight[0][0]):
                    done, size = in_flight.popleft()
                    self._bytes -= size
                    replies.append(done.result())
                self._progress.set()
                await self._deliver(replies)
        finally:
            self._sender = None
            self._progress.set()
            self._all_sent.set()

    async def _deliver(self, replies: list[wc.Command]) -> None:
        """Sends replies taken off the head (`_sending` meanwhile, which drain waits for)."""
        self._sending = True
        try:
            await self._send(replies)
        except (ConnectionError, OSError):
            # The peer is gone: nothing more can be acknowledged (what committed stays
            # committed; the writer's retry on a new connection finds it).
            self._break()
        except Exception as exc:
            self._break()
            await self._failed(exc)
        finally:
            self._sending = False
            if not self._in_flight:
                self._all_sent.set()

    def _break(self) -> None:
        self._broken = True
        for task, _ in self._in_flight:
            task.cancel()
        self._in_flight.clear()
        self._bytes = 0

    async def drain(self) -> None:
        """Waits until every append in flight is acknowledged (or the pipeline broke and its
        failure was handled)."""
        while self._in_flight or self._sending:
            if self._sender is None and not self._sending:
                return  # broken: the connection is closing
            await self._all_sent.wait()

    async def close(self) -> None:
        """The connection is closing: appends in flight are abandoned (what committed stays
        committed; the writer's retry finds it by its event number)."""
        self._broken = True
        sender = self._sender
        if sender is not None:
            sender.cancel()
        tasks = [task for task, _ in self._in_flight]
        self._break()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # The sender is not awaited: it has nothing left to do, and a connection closed while idle
        # must reach its transport's close in this step (the server may be cancelling it).


def _succeeded(task: asyncio.Task[wc.Command]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None
