"""One stream's segments over the segment stores' wire protocol: their lengths, and the events of
a byte range of one segment.

Invariants: a range is read only up to an end the caller knows the segment has reached (a cut's
offset, or its length when sealed), so a read never parks at a segment's tail (window.py makes
events of the bytes). Only what the server cannot have decided is retried
(app/segmentstore/client/retried.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from app.domain.hosts import HostAddress
from app.domain.segment_names import stream_segment_name
from app.segmentstore.client.connections import ConnectionPool
from app.segmentstore.client.retried import NoAnswer, request_retried
from app.segmentstore.wire import commands as wc
from app.streamclient.controller import StreamController
from app.streamclient.cuts import segment_epoch, segment_number
from app.streamclient.errors import (
    AccessRefused,
    StreamError,
    StreamNotFound,
    StreamTruncated,
    StreamUnavailable,
)

R = TypeVar("R", bound=wc.Command)

# The most a segment store sends for one ReadSegment (Pravega's and ours: 2 MiB); two are asked
# at once so the next reply is on its way while this one is parsed.
READ_SIZE: Final = 2 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    segment_id: int
    start: int
    length: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes [start, end) of one segment: whole events, start and end on event boundaries."""

    segment_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def qualified_name(scope: str, stream: str, segment_id: int) -> str:
    """A segment's name on the wire (Pravega's qualified name, with its epoch)."""
    return stream_segment_name(scope, stream, segment_number(segment_id), segment_epoch(segment_id))


class StreamSegments:
    """The segments of one stream on whichever stores the controller names; `close()` when done."""

    def __init__(
        self,
        controller: StreamController,
        scope: str,
        stream: str,
        *,
        token: str = "",
        write: bool = False,
        request_timeout_s: float = 30.0,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.controller = controller
        self.scope = scope
        self.stream = stream
        self._token = token
        self._write = write
        self._renewal = asyncio.Lock()
        self.pool = pool if pool is not None else ConnectionPool(timeout_s=request_timeout_s)
        self._endpoints: dict[int, HostAddress] = {}

    async def close(self) -> None:
        await self.pool.close()

    def name(self, segment_id: int) -> str:
        return qualified_name(self.scope, self.stream, segment_id)

    async def info(self, segment_id: int) -> SegmentInfo:
        name = self.name(segment_id)
        reply = await self.call(
            segment_id,
            lambda rid, token: wc.GetStreamSegmentInfo(rid, name, token),
            (wc.StreamSegmentInfo,),
        )
        assert isinstance(reply, wc.StreamSegmentInfo)
        if not reply.exists or reply.is_deleted:
            raise StreamNotFound(f"segment {name} does not exist (was {self.scope}/{self.stream} deleted?)")
        return SegmentInfo(segment_id, reply.start_offset, reply.write_offset, reply.is_sealed)

    async def read_ahead(self, segment_id: int, position: int, end: int) -> list[wc.SegmentRead]:
        """The bytes from `position` (up to `end`, which the segment has reached) in two replies
        of READ_SIZE at most, asked at once; the second is of no use if the first came back short."""
        name = self.name(segment_id)
        builds = [_read_at(name, at, min(READ_SIZE, end - at)) for at in range(position, end, READ_SIZE)[:2]]
        replies = await self.call_many(segment_id, builds, (wc.SegmentRead,))
        return [r for r in replies if isinstance(r, wc.SegmentRead)]

    async def call(
        self, segment_id: int, build: Callable[[int, str], wc.Command], success: tuple[type[R], ...]
    ) -> wc.Command:
        (reply,) = await self.call_many(segment_id, [build], success)
        return reply

    async def call_many(
        self,
        segment_id: int,
        builds: Sequence[Callable[[int, str], wc.Command]],
        success: tuple[type[R], ...],
    ) -> list[wc.Command]:
        """The commands pipelined to the segment's store; their successful replies in order."""
        try:
            commands, replies = await request_retried(
                self.pool,
                lambda refresh: self._endpoint(segment_id, refresh=refresh),
                lambda refresh: self._current_token(refresh=refresh),
                builds,
            )
        except NoAnswer as exc:
            raise StreamUnavailable(f"segment {self.name(segment_id)}: {exc}") from None
        for command, reply in zip(commands, replies, strict=True):
            if not isinstance(reply, success):
                raise self._failure(segment_id, command, reply)
        return replies

    async def _endpoint(self, segment_id: int, *, refresh: bool) -> HostAddress:
        known = self._endpoints.get(segment_id)
        if known is None or refresh:
            known = self._endpoints[segment_id] = await self.controller.endpoint(
                self.scope, self.stream, segment_id
            )
        return known

    async def token(self) -> str:
        return await self._current_token(refresh=False)

    async def _current_token(self, *, refresh: bool) -> str:
        if refresh:
            stale = self._token
            async with self._renewal:
                if self._token == stale:
                    self._token = await self.controller.token(self.scope, self.stream, write=self._write)
        return self._token

    def _failure(self, segment_id: int, command: wc.Command, reply: wc.Command) -> StreamError:
        name = self.name(segment_id)
        asked = type(command).__name__
        match reply:
            case wc.SegmentIsTruncated():
                asked_at = getattr(command, "offset", -1)
                return StreamTruncated(name, asked_at, reply.start_offset)
            case wc.NoSuchSegment():
                return StreamNotFound(
                    f"segment {name} does not exist (was {self.scope}/{self.stream} deleted?)"
                )
            case wc.AuthTokenCheckFailed():
                return AccessRefused(f"{asked} on {name}: the segment store refused the delegation token")
            case wc.SegmentIsSealed():
                return StreamError(f"{asked} on {name}: the segment is sealed")
        return StreamUnavailable(f"{asked} on {name}: unexpected reply {type(reply).__name__}")


def _read_at(name: str, offset: int, length: int) -> Callable[[int, str], wc.Command]:
    return lambda request_id, token: wc.ReadSegment(name, offset, length, token, request_id)
