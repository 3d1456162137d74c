"""ReadSegment: bounded reads, and reads parked at the tail of a segment until it changes.

Invariant: every read is answered exactly once, echoing its offset and request id: at once when
there are bytes, an end, or a refusal; otherwise after the segment changes (append, merge, seal,
truncate, delete), or empty with at_tail after `tail_wait_s`, or empty at once when the server
closes. A read whose answer would end at the tail of a segment appended to just now lingers
first, parked like the others (tails.py: the writer's next append may be on its way). A parked or
lingering read never holds its connection's other requests. A read whose offset the read
index holds is answered from memory with what PostgreSQL would answer (tails.py, read_index.py);
every other read goes to the database, and `db_reads` counts those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import Final, TypeAlias

from app.metrics.record import StoreTraffic
from app.segmentstore import storage as st
from app.segmentstore.server.refusals import illegal_argument
from app.segmentstore.server.tails import Tails, TailWatch
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode_segment_read

# A reply's data is at most 2 MiB, however much the client suggests (Java's READ_MAX_SIZE), and
# at least 8 bytes are asked for.
MAX_READ_BYTES: Final = 2 * 1024 * 1024
MIN_READ_BYTES: Final = 8

# What a woken read holds while it reads: the connection's turn to answer one woken read, so that
# however many reads wake at once, one reply at a time is read and buffered for a peer.
ReplySlot = Callable[[], AbstractAsyncContextManager[object]]


def read_size(suggested: int) -> int:
    return min(MAX_READ_BYTES, max(MIN_READ_BYTES, suggested))


@dataclass(frozen=True, slots=True)
class DataReply:
    """A SegmentRead whose data is `pieces` joined, kept apart until the socket takes them
    (encode_segment_read): `head` is the reply with its data empty."""

    head: wc.SegmentRead
    pieces: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(map(len, self.pieces))

    def frames(self) -> list[bytes]:
        return encode_segment_read(self.head, self.pieces)


# What a read is answered with: a command (an empty read, a refusal) or bytes.
ReadReply: TypeAlias = wc.Command | DataReply


def _reaches_tail(cmd: wc.ReadSegment, result: st.ReadResult) -> bool:
    """The reply holds bytes up to the committed end of an unsealed segment (more may follow)."""
    return bool(result.pieces) and not result.sealed and cmd.offset + result.size >= result.length


def _reply(cmd: wc.ReadSegment, result: st.ReadResult) -> DataReply:
    end = cmd.offset + result.size
    at_end = end >= result.length
    # Java's flags: at_tail when the next byte is yet to be written, end_of_segment when the
    # segment is sealed and nothing follows.
    head = wc.SegmentRead(
        cmd.segment,
        cmd.offset,
        at_end and not result.sealed,
        at_end and result.sealed,
        b"",
        cmd.request_id,
    )
    return DataReply(head, result.pieces)


class Reads:
    def __init__(
        self,
        storage: st.SegmentStorage,
        tails: Tails,
        tail_wait_s: float,
        traffic: StoreTraffic | None = None,
    ) -> None:
        self._storage = storage
        self._tails = tails
        self._tail_wait_s = tail_wait_s
        self._traffic = traffic

    async def _fetch(self, cmd: wc.ReadSegment) -> st.ReadResult:
        size = read_size(cmd.suggested_length)
        cached = self._tails.index.read(cmd.segment, cmd.offset, size)
        if cached is not None:
            # The entry exists only while the segment is unsealed and not truncated past it.
            if self._traffic is not None:
                self._traffic.cached_read()
            return st.ReadResult(cmd.offset, cached.pieces, cached.length, 0, False)
        if self._traffic is not None:
            self._traffic.db_read()
        ahead = self._tails.ahead
        result = await ahead.answer(cmd.segment, cmd.offset, size)
        if result is None:
            result = await self._storage.read(cmd.segment, cmd.offset, size)
        elif self._traffic is not None:
            self._traffic.read_ahead_read()
        following = cmd.offset + result.size
        if result.size == size and following + size < result.length:
            # A reader catching up: the range it asks for next is committed already, and more after
            # it (its reply is never the tail, whatever happens meanwhile).
            read_next = partial(self._storage.read, cmd.segment, following, size)
            ahead.start(cmd.segment, following, size, read_next)
        return result

    async def read(self, cmd: wc.ReadSegment) -> ReadReply | TailWatch:
        """The reply, or (at the tail of an unsealed segment) the watch to park on with
        `wait_at_tail`. Storage refusals propagate."""
        if cmd.offset < 0:
            # Java's read index checks this before it looks at the segment.
            return illegal_argument(cmd.request_id, cmd.segment, f"read offset {cmd.offset} is negative")
        watch = self._tails.watch(cmd.segment, cmd.offset)
        try:
            result = await self._fetch(cmd)
        except BaseException:
            watch.cancel()
            raise
        if result.pieces or result.sealed or self._tails.closed or self._tail_wait_s <= 0:
            watch.cancel()
            if _reaches_tail(cmd, result) and self._tails.may_linger(cmd.segment):
                # Its writer may be sending more right now: answered by wait_at_tail after the
                # linger (tails.py), off the connection's command loop.
                return self._tails.woken(cmd.segment, cmd.offset)
            return _reply(cmd, result)
        return watch

    async def wait_at_tail(self, cmd: wc.ReadSegment, watch: TailWatch, slot: ReplySlot) -> ReadReply:
        """Parks until the segment changes or the wait runs out; each read after a wake-up holds
        `slot`, and the reply must be sent before the caller yields again. Storage refusals
        propagate."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._tail_wait_s
        while True:
            try:
                woken = await watch.wait(deadline - loop.time())
            finally:
                watch.cancel()
            if not woken:
                return wc.SegmentRead(cmd.segment, cmd.offset, True, False, b"", cmd.request_id)
            if watch.by_append:
                await self._tails.linger(cmd.segment)
            watch = self._tails.watch(cmd.segment, cmd.offset)
            try:
                async with slot():
                    result = await self._fetch(cmd)
            except BaseException:
                watch.cancel()
                raise
            if result.pieces:
                watch.cancel()
                return _reply(cmd, result)
            if result.sealed:
                # Sealed while we waited: Java fails the parked read with SegmentIsSealed at the
                # read's offset (both Java and Rust clients take it as the segment's end).
                watch.cancel()
                return wc.SegmentIsSealed(cmd.request_id, cmd.segment, "", cmd.offset)
            if self._tails.closed:
                watch.cancel()
                return wc.SegmentRead(cmd.segment, cmd.offset, True, False, b"", cmd.request_id)
