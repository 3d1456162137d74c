"""The gRPC port's HTTP/2 limits per connection, on top of grpclib's protocol: what a client may
ask of the server before it has said who it is.

- Handlers: until one of its replies has been taken, a connection's calls are held to the bounds of
  app/api/grpc/h2_first_calls.py (they wait their turn); at most `max_concurrent_streams` (the
  value advertised as SETTINGS_MAX_CONCURRENT_STREAMS) in all. h2 counts a stream the client
  reset as closed at once, while its handler still runs; past the limit a new stream is refused
  with REFUSED_STREAM, as grpc-go bounds its handlers since CVE-2023-44487 (rapid reset).
- Resets: RST_STREAM frames from the client, and the streams refused above, at most
  `max_resets_per_window` per window (Netty's Http2MaxRstFrameDecoder: 200 per 30 s).
- PING and SETTINGS frames: h2 answers each with an ACK, so a flood is work and write buffer for
  nothing; at most so many per window (PINGs counted only while the server sends no stream frames,
  as grpc-go forgives pings once it has sent data, so BDP and keepalive pings never count up).

- Header blocks: the decoded header list at most `max_header_list_bytes`, advertised as
  SETTINGS_MAX_HEADER_LIST_SIZE and enforced from the first request (h2's hpack decoder refuses a
  larger one: an HPACK bomb, one dynamic-table entry referenced many times, decodes to no more);
  the encoded block, HEADERS plus its CONTINUATION frames, at most that and a quarter more while
  it is still arriving (Netty's maxHeaderListSizeGoAway), where h2 alone would buffer 64
  CONTINUATION frames of up to 16 KiB each per connection (CVE-2024-27316 class).
- Unsent replies: app/api/grpc/h2_unsent.py (zero-window stalls, unread sockets).

Past a budget the connection is told GOAWAY ENHANCE_YOUR_CALM and closed. Bytes are fed to h2 in
slices so a budget spent in a large read stops the work on the rest of it. A handler whose task
was cancelled before it ever ran releases its stream too (grpclib releases it only from the
handler), so a reset stream holds nothing until the connection ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grpclib.protocol import AbstractHandler, Connection, EventsProcessor, H2Protocol, Stream
from h2.errors import ErrorCodes
from h2.events import Event as H2Event
from h2.events import PingReceived, RemoteSettingsChanged, RequestReceived, StreamReset
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes

from app.api.grpc.h2_first_calls import FirstCalls, FirstCallSlots
from app.api.grpc.h2_unsent import ConnectionSends, UnsentBudget, reset_quietly, watch_streams
from app.observability.throttled_log import ThrottledWarning

log = logging.getLogger(__name__)

# h2 parses a whole read (up to 256 KiB from asyncio) before grpclib sees one event; fed in
# slices, a connection over its budget costs at most one slice more (about 150 streams here).
FEED_SLICE_BYTES = 4 * 1024


@dataclass(frozen=True)
class H2Limits:
    """Per-connection budgets; the settings' defaults are these (app/settings/model.py)."""

    max_concurrent_streams: int = 100
    max_calls_before_first_reply: int = 4
    max_replies_building_before_first_reply: int = 16
    max_resets_per_window: int = 200
    max_pings_per_window: int = 100
    max_settings_per_window: int = 100
    window_s: float = 30.0
    # grpc-java's default maxInboundMetadataSize (GrpcUtil.DEFAULT_MAX_HEADER_LIST_SIZE).
    max_header_list_bytes: int = 8 * 1024
    max_unsent_bytes_per_connection: int = 4 * 1024 * 1024
    max_unsent_bytes: int = 8 * 1024 * 1024
    # Tomcat's streamWriteTimeout.
    send_stall_s: float = 20.0

    @property
    def max_header_block_bytes(self) -> int:
        """The encoded header block a connection may still be sending: Netty's
        maxHeaderListSizeGoAway, the header list limit and a quarter more."""
        return self.max_header_list_bytes + self.max_header_list_bytes // 4

    def first_call_slots(self) -> FirstCallSlots:
        return FirstCallSlots(self.max_replies_building_before_first_reply)

    def unsent_budget(self) -> UnsentBudget:
        return UnsentBudget(self.max_unsent_bytes_per_connection, self.max_unsent_bytes, self.send_stall_s)


class WindowBudget:
    """At most `limit` spends per fixed window of `window_s`, the window starting at the first
    spend after the previous one ended (Netty's Http2MaxRstFrameListener counts so)."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._window_s = window_s
        self._clock = clock
        self._started = 0.0
        self._spent = 0

    def spend(self) -> bool:
        """False once this window's spends exceed the limit."""
        now = self._clock()
        if self._spent == 0 or now - self._started >= self._window_s:
            self._started, self._spent = now, 0
        self._spent += 1
        return self._spent <= self._limit

    def forgive(self) -> None:
        self._spent = 0


class LimitedEventsProcessor(EventsProcessor):
    """grpclib's event processor, each event first charged to the connection's budgets."""

    def __init__(
        self, handler: AbstractHandler, connection: Connection, limits: H2Limits, cut_offs: ThrottledWarning
    ) -> None:
        super().__init__(handler, connection)
        self._limits = limits
        self._cut_offs = cut_offs
        self._resets = WindowBudget(limits.max_resets_per_window, limits.window_s)
        self._pings = WindowBudget(limits.max_pings_per_window, limits.window_s)
        self._settings = WindowBudget(limits.max_settings_per_window, limits.window_s)
        self.cut_off = False
        # Whether the connection holds replies its client is not taking (set once its sends exist).
        self.backed_up: Callable[[], bool] = lambda: False
        # grpc-go's rule: a ping is only suspect while the server has sent nothing since.
        for name in ("headers_send_process", "data_send_process"):
            connection.__dict__[name] = self._forgiving(getattr(connection, name))

    def _forgiving(self, sent: Callable[[], None]) -> Callable[[], None]:
        pings = self._pings

        def on_send() -> None:
            pings.forgive()
            sent()

        return on_send

    def process(self, event: H2Event) -> None:
        if self.cut_off:
            return
        if isinstance(event, RequestReceived):
            if self._reset_already(event.stream_id):
                return
            if len(self.streams) >= self._limits.max_concurrent_streams:
                running = self._limits.max_concurrent_streams
                self._refuse(event.stream_id, f"more than {running} handlers running")
                return
            if self.backed_up():
                # Its replies are not being taken: a new call would only build one more to hold.
                self._refuse(event.stream_id, "its replies not taken")
                return
        elif isinstance(event, StreamReset):
            if event.remote_reset and not self._resets.spend():
                self.cut_off_for(f"over {self._limits.max_resets_per_window} stream resets in {self._window}")
                return
        elif isinstance(event, PingReceived):
            if not self._pings.spend():
                self.cut_off_for(f"over {self._limits.max_pings_per_window} PINGs in {self._window}")
                return
        elif isinstance(event, RemoteSettingsChanged) and not self._settings.spend():
            self.cut_off_for(f"over {self._limits.max_settings_per_window} SETTINGS in {self._window}")
            return
        super().process(event)

    def _reset_already(self, stream_id: int | None) -> bool:
        # h2 parses a whole read before any event is handled: a stream the client opened and
        # reset in that read is closed by now, and a handler started for it would only be cancelled
        # (its StreamReset, next in the events, is still charged to the budget).
        # (h2 drops a closed stream from its table when it next counts the open ones.)
        if stream_id is None:
            return True
        stream = self.connection._connection.streams.get(stream_id)
        return stream is None or stream.closed

    @property
    def _window(self) -> str:
        return f"{self._limits.window_s:g} s"

    def _refuse(self, stream_id: int, why: str) -> None:
        # A refused stream is a reset the client made us send: it spends the same budget.
        if not self._resets.spend():
            budget = self._limits.max_resets_per_window
            self.cut_off_for(f"over {budget} streams reset or refused in {self._window} ({why})")
            return
        h2 = self.connection._connection
        h2.reset_stream(stream_id, error_code=ErrorCodes.REFUSED_STREAM)

    def reset_stalled(self, stream: Stream) -> None:
        """Resets a stream that could send nothing of its reply for the stall deadline and ends its
        handler, as a client's RST_STREAM would."""
        reset_quietly(self.connection, stream, ErrorCodes.CANCEL)
        if stream.id in self.streams:
            stream.__terminated__(f"sent nothing for {self._limits.send_stall_s:g} s (flow control)")
            self.handler.cancel(stream)

    def cut_off_for(self, reason: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM and close, for `reason` (logged, throttled)."""
        self.cut_off = True
        if self.connection.is_closing():
            return
        self._cut_offs.record(f"{self.connection.get_peer().addr()}: {reason}")
        h2 = self.connection._connection
        h2.close_connection(error_code=ErrorCodes.ENHANCE_YOUR_CALM)
        self.connection.flush()
        self.close(f"cut off: {reason}")

    def register(self, stream: Stream) -> Callable[[], None]:
        release = super().register(stream)
        released = False

        def release_once() -> None:
            nonlocal released
            if not released:
                released = True
                release()

        return release_once


def _free_frames(task: asyncio.Task[None]) -> None:
    """Frees what a cancelled handler's frames hold (its reply among them) now, not at the next full
    collection: the task keeps its CancelledError, whose traceback holds the frame that caught it,
    the task's own step, whose `self` is the task (a cycle). Asking for the result hands the
    error over and drops the task's reference to it."""
    try:
        task.result()
    except asyncio.CancelledError as error:
        traceback.clear_frames(error.__traceback__)


class LimitedHandler(AbstractHandler):
    """Wraps grpclib's server handler (one per connection) so that its calls are held to the first
    calls' bounds until one of its replies is taken (app/api/grpc/h2_first_calls.py), and a handler
    task that ends without ever running (cancelled by a reset before its first step) still releases
    its stream."""

    def __init__(self, inner: Any, limits: H2Limits, slots: FirstCallSlots) -> None:
        self._inner = inner
        self.first_calls = FirstCalls(slots, limits.max_calls_before_first_reply, self._start)

    def accept(self, stream: Stream, headers: Any, release_stream: Callable[[], None]) -> None:
        self.first_calls.accept(stream, headers, release_stream)

    def _start(self, stream: Stream, headers: Any, release_stream: Callable[[], None]) -> bool:
        self._inner.accept(stream, headers, release_stream)
        task: asyncio.Task[None] | None = self._inner._tasks.get(stream)
        if task is None:
            return False
        task.add_done_callback(lambda done: self._ended(stream, done, release_stream))
        return True

    def _ended(self, stream: Stream, task: asyncio.Task[None], release_stream: Callable[[], None]) -> None:
        release_stream()
        # grpclib keeps a finished task until ten more streams arrive on its connection (and a
        # connection's handler until ten more connections arrive): a cancelled one holds its
        # CancelledError, whose traceback holds every frame of the handler, its reply among them.
        # A connection cut off with a hundred replies unsent would keep them all for as long as no
        # new stream or connection comes.
        if self._inner._tasks.get(stream) is task:
            del self._inner._tasks[stream]
        self._inner._cancelled.discard(task)
        if task.cancelled():
            _free_frames(task)
        self.first_calls.ended(stream)

    def cancel(self, stream: Stream) -> None:
        if self.first_calls.cancel_waiting(stream):
            return
        # A stream reset for its stall may have ended its handler already.
        if stream in self._inner._tasks:
            self._inner.cancel(stream)

    def close(self) -> None:
        self.first_calls.close()
        self._inner.close()


class LimitedH2Protocol(H2Protocol):
    """grpclib's server protocol with the limits of this module."""

    def __init__(
        self,
        protocol: H2Protocol,
        limits: H2Limits,
        cut_offs: ThrottledWarning,
        unsent: UnsentBudget,
        first_call_slots: FirstCallSlots,
    ) -> None:
        super().__init__(
            LimitedHandler(protocol.handler, limits, first_call_slots), protocol.config, protocol.h2_config
        )
        self._limits = limits
        self._cut_offs = cut_offs
        self._unsent = unsent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        h2 = self.connection._connection
        h2.update_settings(
            {
                SettingCodes.MAX_CONCURRENT_STREAMS: self._limits.max_concurrent_streams,
                SettingCodes.MAX_HEADER_LIST_SIZE: self._limits.max_header_list_bytes,
            }
        )
        # h2 applies the limit once the client acknowledges it; one that never does would have
        # h2's 64 KiB until then.
        h2.decoder.max_header_list_size = self._limits.max_header_list_bytes
        self.connection.flush()
        self.processor = LimitedEventsProcessor(self.handler, self.connection, self._limits, self._cut_offs)
        self.sends = ConnectionSends(
            self._unsent, self.connection, self.processor.cut_off_for, self.processor.reset_stalled
        )
        watch_streams(self.connection, self.sends)
        self.processor.backed_up = self.sends.backed_up
        self.sends.on_reply = self.handler.first_calls.reply_started
        self.sends.on_taken = self.handler.first_calls.taken

    def pause_writing(self) -> None:
        super().pause_writing()
        self.sends.paused(True)

    def resume_writing(self) -> None:
        super().resume_writing()
        self.sends.paused(False)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.sends.detach()
        super().connection_lost(exc)

    def _header_block_too_large(self) -> bool:
        pending = self.connection._connection.incoming_buffer._headers_buffer
        return sum(len(frame.data) for frame in pending) > self._limits.max_header_block_bytes

    def data_received(self, data: bytes) -> None:
        for start in range(0, len(data), FEED_SLICE_BYTES):
            if self.processor.cut_off or self.connection.is_closing():
                return
            piece = data if len(data) <= FEED_SLICE_BYTES else data[start : start + FEED_SLICE_BYTES]
            try:
                events = self.connection.feed(piece)
            except ProtocolError:
                log.debug("Protocol error", exc_info=True)
                # h2 has queued its GOAWAY with the error's code; grpclib closed without sending it.
                self.connection.flush()
                self.processor.close("Protocol error")
                return
            self.connection.flush()
            for event in events:
                self.processor.process(event)
            if self._header_block_too_large():
                self.processor.cut_off_for(
                    f"a header block over {self._limits.max_header_block_bytes} bytes (CONTINUATION frames)"
                )
                return
            if not self.connection.is_closing():
                self.connection.flush()

    handler: LimitedHandler
    processor: LimitedEventsProcessor
    sends: ConnectionSends
