"""What one store port lets its clients hold: connections, time, and memory shared by them all.

Invariant: the bytes of frames still arriving (past a size every legitimate small request stays
under) and the bytes of replies queued for peers that stopped reading are each bounded for the
whole port, not only per connection; past a bound, a connection asking for more (or the one whose
replies have waited longest) is closed, never the others. A connection that stays silent, or in the middle
of a frame, past its bound is closed by the port's sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

# Frames up to this size are read without touching the port's budget (a counter per large frame
# is all the append path pays); it also bounds what a connection holds unaccounted.
UNCOUNTED_FRAME_BYTES: Final = 64 * 1024
# A transport holding more than asyncio's default high-water mark of replies has a peer that is
# not keeping up: only then are its queued bytes counted against the port's reply budget.
SLOW_READER_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The defaults are the settings' (app/settings/model.py, `--segment-store-*`)."""

    # Largest frame before Hello (or, with authentication on, before a valid delegation token).
    untrusted_frame_bytes: int = 1024 * 1024
    # Bytes of unfinished frames larger than UNCOUNTED_FRAME_BYTES, summed over the port.
    frame_budget_bytes: int = 64 * 1024 * 1024
    # Longest a frame (an AppendBlock with its end) may take to arrive once its header has.
    frame_deadline_s: float = 30.0
    # Longest a new connection may take to say Hello.
    hello_timeout_s: float = 10.0
    # Longest a connection may stay silent with no writer set up and nothing pending.
    idle_timeout_s: float = 120.0
    # Bytes of replies queued for slow readers, summed over the port.
    reply_budget_bytes: int = 32 * 1024 * 1024
    # Open connections of the port.
    max_connections: int = 1000
    # Segment reads fetching their bytes at once on the port (each up to a 2 MiB reply, copied a
    # few times on its way out), below the database pool's size.
    reads_at_once: int = 8


class FrameBudget:
    """The bytes of unfinished large frames of every connection of a port."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self.taken = 0

    def take(self, n: int) -> bool:
        if self.taken + n > self._limit:
            return False
        self.taken += n
        return True

    def give(self, n: int) -> None:
        self.taken -= n


class Abortable(Protocol):
    def abort(self, reason: str) -> None: ...


class ReplyBacklog:
    """The replies queued for the port's slow readers; past the budget, the connections that have
    not drained for the longest are aborted (their queued bytes freed at once) until it fits
    again: a client that stopped reading goes before one that just got a large reply."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._queued: dict[Abortable, int] = {}
        self.total = 0

    def hold(self, who: Abortable, queued: int) -> None:
        # An update keeps its place: the dict's order is the order the queues began to wait.
        self.total += queued - self._queued.get(who, 0)
        self._queued[who] = queued
        while self.total > self._limit and self._queued:
            stalest = next(iter(self._queued))
            backlog = self._queued[stalest]
            self.release(stalest)
            stalest.abort(f"{backlog} bytes of replies unread, past the port's budget of {self._limit}")

    def release(self, who: Abortable) -> None:
        self.total -= self._queued.pop(who, 0)
