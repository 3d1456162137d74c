"""Calls on gRPC connections that have not yet taken a reply: a client can advertise a zero
window (or never read) and have the server build reply after reply it will never take. Replies
held are bounded by app/api/grpc/h2_unsent.py from the moment they start to be sent; this module
bounds the ones still being built (the rows read, the message, its encoding: several times the
reply's bytes each), which no budget of unsent bytes sees:

- per connection, at most `per_connection` calls run until one of its replies has been taken whole;
- over all such connections, at most `in_all` calls are building a reply at once (a call stops
  counting when its reply starts to be sent, or when it ends); the rest wait their turn, first come
  first served.

A waiting call is not refused: a real client's first burst on a new channel waits only for the
milliseconds its first reply takes, and REFUSED_STREAM is retried by grpc-java but not by every
client.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpclib.protocol import Stream


class FirstCallSlots:
    """The process's calls building a reply on connections that have taken none yet."""

    def __init__(self, in_all: int) -> None:
        self.in_all = in_all
        self.building = 0
        # Connections with calls waiting for a slot, in the order they began to wait.
        self._waiting: deque[FirstCalls] = deque()

    def take(self) -> bool:
        if self.building >= self.in_all:
            return False
        self.building += 1
        return True

    def give_back(self) -> None:
        self.building -= 1
        while self._waiting and self.building < self.in_all:
            self._waiting.popleft().admit()

    def wait(self, calls: FirstCalls) -> None:
        if calls not in self._waiting:
            self._waiting.append(calls)

    def forget(self, calls: FirstCalls) -> None:
        if calls in self._waiting:
            self._waiting.remove(calls)


@dataclass
class _Call:
    stream: Stream
    headers: Any
    release_stream: Callable[[], None]


@dataclass(eq=False)
class FirstCalls:
    """One connection's calls held to the bounds above; `start` runs a call's handler and returns
    whether it runs (False when it ended before it began)."""

    slots: FirstCallSlots
    per_connection: int
    start: Callable[[Stream, Any, Callable[[], None]], bool]
    reply_taken: bool = False
    running: int = 0
    _waiting: deque[_Call] = field(default_factory=deque)
    # Streams whose calls hold a slot of `slots`: their replies are being built.
    _building: set[Stream] = field(default_factory=set)
    _closed: bool = False

    def accept(self, stream: Stream, headers: Any, release_stream: Callable[[], None]) -> None:
        self._waiting.append(_Call(stream, headers, release_stream))
        self.admit()

    def admit(self) -> None:
        while self._waiting and not self._closed:
            if self.reply_taken:
                call = self._waiting.popleft()
                self._run(call)
                continue
            if self.running >= self.per_connection:
                return
            if not self.slots.take():
                self.slots.wait(self)
                return
            call = self._waiting.popleft()
            self._building.add(call.stream)
            if not self._run(call):
                self._built(call.stream)

    def _run(self, call: _Call) -> bool:
        if not self.start(call.stream, call.headers, call.release_stream):
            return False
        self.running += 1
        return True

    def reply_started(self, stream: Stream) -> None:
        self._built(stream)

    def taken(self) -> None:
        """One of the connection's replies was handed whole to its socket."""
        if not self.reply_taken:
            self.reply_taken = True
            self.admit()

    def ended(self, stream: Stream) -> None:
        self.running -= 1
        self._built(stream)
        self.admit()

    def cancel_waiting(self, stream: Stream) -> bool:
        """Drops a call reset before its turn came (it never ran: only its stream to release)."""
        for call in self._waiting:
            if call.stream is stream:
                self._waiting.remove(call)
                call.release_stream()
                return True
        return False

    def close(self) -> None:
        # The connection's streams are terminated by its processor; calls still waiting never run.
        self._closed = True
        self._waiting.clear()
        self.slots.forget(self)

    def _built(self, stream: Stream) -> None:
        if stream in self._building:
            self._building.discard(stream)
            self.slots.give_back()
