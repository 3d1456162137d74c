"""The clock port: the one source of time, milliseconds since the Unix epoch, injectable so
tests and benches drive time by hand."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...
