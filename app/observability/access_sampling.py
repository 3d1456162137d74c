"""Sampling of the access log's repeated lines: a client in a retry loop (a writer asking getURI
hundreds of times a second while the database is out) must not turn the log into a copy of its
loop. Lines are alike when they share their kind, method, path, status and peer host (the request
id, duration and peer port differ on every line); of alike lines, the first `per_window` of each
window are written, the rest counted and reported in one line when the window ends.

The sampler is a filter on the access logger, and every other logger is untouched. The access
logs ask `admit` first, so a suppressed line is never made (a record per call is most of a
line's cost, paid hundreds of times a second under a steady load); a line they make after
`admit` carries `ADMITTED_ATTR` and passes the filter uncounted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from app.observability.logs import ACCESS_FIELDS_ATTR, ACCESS_LOGGER

# A window per kind of line: short enough that a summary follows its storm closely.
WINDOW_S = 1.0
# Kinds of line tracked at once; a client cycling through more (many peers, many paths) is
# sampled per kind up to this many, then its further kinds pass unsampled until windows end.
MAX_KINDS = 4096
_SUMMARY_ATTR = "pgc_access_summary"
# On a line made after `admit` said yes: the filter does not count it a second time.
ADMITTED_ATTR = "pgc_access_admitted"

Kind = tuple[object, ...]


@dataclass(slots=True)
class _Window:
    seen: int = 0
    suppressed: int = 0
    timer: asyncio.TimerHandle | None = None


def _kind(fields: dict[str, object]) -> Kind:
    if "peer" in fields:
        # gRPC's peer is host:port, and a client's every new connection has a port of its own.
        host = str(fields["peer"]).rpartition(":")[0] or str(fields["peer"])
    else:
        host = str(fields.get("remote", "-"))
    return (fields.get("kind"), fields.get("method"), fields.get("path"), fields.get("status"), host)


def _describe(kind: Kind) -> str:
    access_kind, method, path, status, host = kind
    words = [str(access_kind).upper() if access_kind == "rest" else "gRPC", str(method)]
    if path is not None:
        words.append(str(path))
    words.append(str(status))
    return f"{' '.join(words)} from {host}"


class AccessSampler(logging.Filter):
    """Runs on the event loop's thread (both access logs write there); the window's end is a loop
    callback, so a storm that stops is still summed up."""

    def __init__(self, per_window: int, window_s: float = WINDOW_S) -> None:
        super().__init__()
        if per_window < 1:
            raise ValueError(f"the lines written per window must be at least 1, got {per_window}")
        self._per_window = per_window
        self._window_s = window_s
        self._windows: dict[Kind, _Window] = {}
        self._logger = logging.getLogger(ACCESS_LOGGER)

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, ACCESS_FIELDS_ATTR, None)
        if not isinstance(fields, dict) or getattr(record, _SUMMARY_ATTR, False):
            return True
        if getattr(record, ADMITTED_ATTR, False):
            return True
        return self.admit(fields)

    def admit(self, fields: dict[str, object]) -> bool:
        """Whether a line of these fields is written; counted as written or suppressed."""
        kind = _kind(fields)
        window = self._windows.get(kind)
        if window is None:
            if len(self._windows) >= MAX_KINDS:
                return True
            window = self._open(kind)
        window.seen += 1
        if window.seen <= self._per_window:
            return True
        window.suppressed += 1
        return False

    def close(self) -> None:
        """Writes what the open windows suppressed, and stops their timers."""
        for kind in list(self._windows):
            self._end(kind)

    def _open(self, kind: Kind) -> _Window:
        window = _Window()
        self._windows[kind] = window
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Off the loop (a thread): no timer, so this kind is never sampled.
            window.seen = -(1 << 62)
            return window
        window.timer = loop.call_later(self._window_s, self._end, kind)
        return window

    def _end(self, kind: Kind) -> None:
        window = self._windows.pop(kind, None)
        if window is None:
            return
        if window.timer is not None:
            window.timer.cancel()
        if window.suppressed:
            self._logger.info(
                "%s: %d more alike lines in %.1f s not written",
                _describe(kind),
                window.suppressed,
                self._window_s,
                extra={
                    _SUMMARY_ATTR: True,
                    ACCESS_FIELDS_ATTR: {"kind": "sampled", "suppressed": window.suppressed},
                },
            )


def admit(fields: dict[str, object]) -> bool:
    """Asked by an access log before it makes a line of `fields`: False when a sampler on the
    access logger suppresses it (counted for its window's summary), as the logger's filters
    would have decided in their order. A line made after True carries `ADMITTED_ATTR`."""
    for candidate in logging.getLogger(ACCESS_LOGGER).filters:
        if isinstance(candidate, AccessSampler) and not candidate.admit(fields):
            return False
    return True


def sample_access_log(per_window: int) -> Callable[[], None]:
    """Installs a sampler on the access logger; returns what removes it (writing its counts).
    0 writes every line."""
    if per_window <= 0:
        return lambda: None
    sampler = AccessSampler(per_window)
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addFilter(sampler)

    def remove() -> None:
        logger.removeFilter(sampler)
        sampler.close()

    return remove
