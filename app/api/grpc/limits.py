"""The gRPC server's guards on what a client sends, before any handler sees it: a message over
the size limit is refused from its 5-byte length prefix (RESOURCE_EXHAUSTED, its body never read,
so never held), and bytes that do not parse as the RPC's request answer INVALID_ARGUMENT with one
rate-limited log line, where grpclib alone would answer UNKNOWN and log a traceback per call."""

from __future__ import annotations

import logging
import struct
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpclib.server
from google.protobuf.message import DecodeError
from grpclib.const import Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from app.api.grpc.coalescing import CoalescingServer
from app.api.grpc.preencoded import encode_reply
from app.domain.limits import MAX_GRPC_MESSAGE_BYTES

log = logging.getLogger(__name__)

# One log line per kind of refusal per this many seconds: a client sending garbage in a loop
# must not flood the log (each line says how many were left out since the previous one).
REFUSAL_LOG_INTERVAL_S = 10.0


class RateLimitedLog:
    """Logs at most one warning per `interval_s`, counting the ones it left out in between."""

    def __init__(
        self, interval_s: float = REFUSAL_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ):
        self._interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._suppressed = 0

    def warning(self, message: str) -> None:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval_s:
            self._suppressed += 1
            return
        suffix = f" ({self._suppressed} more since the last such line)" if self._suppressed else ""
        self._last, self._suppressed = now, 0
        log.warning("%s%s", message, suffix)


class CheckedProtoCodec(ProtoCodec):
    """grpclib's protobuf codec, except that a request that does not parse is the client's error:
    INVALID_ARGUMENT, one short log line (rate-limited), no traceback; and a pre-encoded reply
    is sent without serializing it again."""

    def __init__(self, refusals: RateLimitedLog | None = None) -> None:
        self._refusals = refusals if refusals is not None else RateLimitedLog()

    def encode(self, message: Any, message_type: Any) -> bytes:
        # A reply served from cached bytes (app/api/grpc/reply_cache.py) leaves as it is.
        data = encode_reply(message, message_type)
        return super().encode(message, message_type) if data is None else data

    def decode(self, data: bytes, message_type: Any) -> Any:
        try:
            return super().decode(data, message_type)
        except DecodeError as exc:
            name = message_type.DESCRIPTOR.full_name
            self._refusals.warning(f"refused a malformed {name} ({len(data)} bytes): {exc}")
            raise GRPCError(Status.INVALID_ARGUMENT, f"invalid protobuf byte sequence for {name}") from None


class BoundedService:
    """A grpclib servicer whose every RPC refuses request messages over `max_message_bytes`
    before reading them, with gRPC's own answer (RESOURCE_EXHAUSTED, "gRPC message exceeds
    maximum size"). grpclib has no receive limit of its own: it reads a message whole, as long as
    its prefix says, and only then decodes it."""

    def __init__(
        self,
        inner: Any,
        max_message_bytes: int = MAX_GRPC_MESSAGE_BYTES,
        refusals: RateLimitedLog | None = None,
    ) -> None:
        self._inner = inner
        self._max = max_message_bytes
        self._refusals = refusals if refusals is not None else RateLimitedLog()

    def __mapping__(self) -> dict[str, Handler]:
        return {
            path: Handler(
                self._bounded(path, handler.func),
                handler.cardinality,
                handler.request_type,
                handler.reply_type,
            )
            for path, handler in self._inner.__mapping__().items()
        }

    def _bounded(self, path: str, func: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
        async def call(stream: grpclib.server.Stream[Any, Any]) -> None:
            _limit_reads(stream, path, self._max, self._refusals)
            _checked_framing(stream, path, self._refusals)
            await func(stream)

        return call


def _limit_reads(
    stream: grpclib.server.Stream[Any, Any], path: str, max_bytes: int, refusals: RateLimitedLog
) -> None:
    # grpclib reads a message as recv_data(5) (flag and length) then recv_data(length), and
    # acknowledges HTTP/2 data only as it is read: refusing the length here means the body is
    # never read, at most one flow-control window of it is ever buffered, and the stream is
    # reset once the error status is sent. `_stream` (the HTTP/2 stream) is grpclib's own
    # attribute: the one place this module leans on its internals.
    h2_stream = stream._stream
    # The stream holds this wrapper, so the wrapper must not hold the stream (nor its bound
    # method): that cycle outlived every call until a full collection, whose pauses were the
    # p99 of the hot reads. The caller holds the stream while it reads, so the weak one is live.
    target = weakref.ref(h2_stream)
    read = type(h2_stream).recv_data

    async def recv_data(size: int) -> bytes:
        if size > max_bytes:
            refusals.warning(f"refused a {size}-byte message to {path}: over {max_bytes}")
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED, f"gRPC message exceeds maximum size {max_bytes}: {size}"
            )
        live = target()
        if live is None:
            raise GRPCError(Status.CANCELLED, "the call's stream is gone")
        return await read(live, size)

    h2_stream.recv_data = recv_data  # type: ignore[method-assign]


def bounded_server(
    services: Iterable[Any], max_message_bytes: int = MAX_GRPC_MESSAGE_BYTES
) -> grpclib.server.Server:
    """A grpclib server for `services` with both guards: the size limit and the checked codec
    (and its writes coalesced per loop turn)."""
    oversized = RateLimitedLog()
    return CoalescingServer(
        [BoundedService(service, max_message_bytes, oversized) for service in services],
        codec=CheckedProtoCodec(RateLimitedLog()),
    )


def _checked_framing(stream: grpclib.server.Stream[Any, Any], path: str, refusals: RateLimitedLog) -> None:
    # grpclib's reader answers broken framing with the exceptions of its own checks: a prefix cut
    # short (struct.error), a length past the data (AssertionError), the compressed flag
    # (NotImplementedError; we offer no encoding), or no message at all (None, which every
    # handler here would take for a request). Each is the client's error: INVALID_ARGUMENT.
    # Held weakly for the reason `_limit_reads` gives: the stream holds this wrapper.
    target = weakref.ref(stream)
    receive = type(stream).recv_message

    async def recv_message() -> Any:
        live = target()
        if live is None:
            raise GRPCError(Status.CANCELLED, "the call's stream is gone")
        try:
            message = await receive(live)
        except (struct.error, AssertionError, NotImplementedError) as exc:
            refusals.warning(f"refused a malformed gRPC frame to {path}: {type(exc).__name__}")
            raise GRPCError(Status.INVALID_ARGUMENT, "malformed gRPC message framing") from None
        if message is None:
            raise GRPCError(Status.INVALID_ARGUMENT, "the call carries no request message")
        return message

    stream.recv_message = recv_message  # type: ignore[method-assign]
