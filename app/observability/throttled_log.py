"""A warning that an attacker can trigger at will, logged at most once per interval with a count:
the first occurrence at once, then one line per interval saying how many more there were, so a
flood costs a few lines instead of one (or one traceback) per event."""

from __future__ import annotations

import asyncio
import logging

DEFAULT_INTERVAL_S = 10.0


class ThrottledWarning:
    """Must be used on the event loop's thread (the interval's end is a loop callback)."""

    def __init__(self, logger: logging.Logger, what: str, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self._logger = logger
        self._what = what
        self._interval_s = interval_s
        self._window: asyncio.TimerHandle | None = None
        self._suppressed = 0
        self._last_detail = ""

    def record(self, detail: str) -> None:
        if self._window is None:
            self._logger.warning(
                "%s: %s (repeats are counted and logged once per %.0f s)",
                self._what,
                detail,
                self._interval_s,
            )
            self._open_window()
            return
        self._suppressed += 1
        self._last_detail = detail

    def close(self) -> None:
        if self._window is not None:
            self._window.cancel()
            self._window = None

    def _open_window(self) -> None:
        self._window = asyncio.get_running_loop().call_later(self._interval_s, self._end_window)

    def _end_window(self) -> None:
        self._window = None
        if not self._suppressed:
            return
        self._logger.warning(
            "%s: %d more in the last %.0f s (the last: %s)",
            self._what,
            self._suppressed,
            self._interval_s,
            self._last_detail,
        )
        self._suppressed = 0
        # A flood that goes on keeps the window open: one line per interval while it lasts.
        self._open_window()
