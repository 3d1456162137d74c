"""A clock for tests and benches (the Clock port): time moves only when its caller moves it."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
