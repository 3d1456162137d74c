"""Work gathered during one turn of the event loop and flushed once at its end: the gRPC server's
socket writes, the store's coalesced statements, the segment store's create replies and its
wake-ups to the other stores of its run.

Invariant: after `ask()`, the flush runs exactly once, in a later turn (after the callbacks
already queued when it was first asked for), however many times it is asked for before it runs;
asked for again while or after it runs, it runs again. It runs on the loop `ask()` was called on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class EndOfTurn:
    """Runs `flush` once at the end of the current event-loop turn, however many times it is
    asked for in that turn. The flush takes what its owner gathered meanwhile; an exception it
    raises goes to the loop's exception handler, and the next ask schedules it again."""

    __slots__ = ("_flush", "_scheduled")

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._scheduled = False

    @property
    def scheduled(self) -> bool:
        """Whether a flush is due at the end of this turn."""
        return self._scheduled

    def ask(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        # Cleared first: what the flush itself (or a failure in it) leaves asks for a turn of its own.
        self._scheduled = False
        self._flush()
