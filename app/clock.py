"""The process's one clock: milliseconds since the Unix epoch (injectable for tests)."""

import time


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
