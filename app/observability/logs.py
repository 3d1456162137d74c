"""The process's log output: one handler on stderr, text (the default) or JSON lines, each record
stamped with the request id, scope and stream of the work that logged it.

Invariant: a JSON line is one complete object per record (exceptions included, newlines escaped),
so a log shipper never has to reassemble lines; the text format stays what it always was, plus
` request_id=...` when a record belongs to a request.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from app.observability import context

LOG_FORMATS = ("text", "json")
ACCESS_LOGGER = "pgcontroller.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Fields an access log line carries besides the message (JSON: as keys of their own).
ACCESS_FIELDS_ATTR = "access"
# Loggers whose set-up chatter says nothing an operator acts on: quiet unless DEBUG.
_QUIET_BELOW_DEBUG = ("alembic",)
# Loggers whose failures are an outage's expected retries: the exception's one line says it all,
# where its traceback (asyncpg's pool reconnecting, each second of a database outage) buries it.
_ONE_LINE_FAILURES = ("asyncpg.pool",)


_CONTEXT_VARS = (("request_id", context.request_id), ("scope", context.scope), ("stream", context.stream))
_CONTEXT_FIELDS = tuple(name for name, _ in _CONTEXT_VARS)


class ContextFilter(logging.Filter):
    """Copies the current request id, scope and stream onto each record it passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _CONTEXT_VARS:
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class OneLineFailure(logging.Filter):
    """Puts a record's exception on its message line, as `repr`, instead of a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()}: {record.exc_info[1]!r}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def _iso_utc(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value:
                line[name] = value
        extra = getattr(record, ACCESS_FIELDS_ATTR, None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        rid = getattr(record, "request_id", None)
        # Access lines carry the id in their own words already.
        if rid and getattr(record, ACCESS_FIELDS_ATTR, None) is None:
            text = f"{text} request_id={rid}"
        return text


def formatter_for(log_format: str) -> logging.Formatter:
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(
    level: str, log_format: str = "text", *, stream: TextIO | None = None, force: bool = False
) -> None:
    """One handler on stderr in `log_format`, at `level`. As `logging.basicConfig`, a process
    whose root logger has handlers already (a test runner's) is left as it is unless `force`."""
    formatter = formatter_for(log_format)
    root = logging.getLogger()
    if root.handlers and not force:
        return
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(ContextFilter())
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.getLevelName(level.upper()) > logging.DEBUG
    for name in _QUIET_BELOW_DEBUG:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
    for name in _ONE_LINE_FAILURES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineFailure) for f in logger.filters):
            logger.addFilter(OneLineFailure())


# Beyond this a list of ranges is no longer read at a glance; the count says how many are left.
_MOST_RANGE_PARTS = 12


def number_ranges(numbers: Iterable[int]) -> str:
    """`0-49,60-99` for a set of numbers, a bucket list an operator can read at a glance. Evenly
    spaced runs collapse too (`0-98 step 2`: the share of one of two controllers), and a list that
    stays long is cut after its first parts, with the count of the rest."""
    ordered = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        if i + 1 < len(ordered):
            stride = ordered[i + 1] - ordered[i]
            while j + 1 < len(ordered) and ordered[j + 1] - ordered[j] == stride:
                j += 1
            # A pair is clearer as two numbers, unless adjacent; a longer run collapses.
            if j - i < 2 and stride != 1:
                j = i
        if j == i:
            parts.append(str(ordered[i]))
        elif ordered[i + 1] - ordered[i] == 1:
            parts.append(f"{ordered[i]}-{ordered[j]}")
        else:
            parts.append(f"{ordered[i]}-{ordered[j]} step {ordered[i + 1] - ordered[i]}")
        i = j + 1
    if len(parts) > _MOST_RANGE_PARTS:
        shown = parts[:_MOST_RANGE_PARTS]
        return ",".join(shown) + f",... ({len(parts) - len(shown)} more)"
    return ",".join(parts)
