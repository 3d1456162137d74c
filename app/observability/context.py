"""The request id, scope and stream of the work the current task does, as context variables: set
where a call arrives (gRPC, REST) or where a queued request is run, read by every log line.

Invariant: a value is set only for the duration of a `bound` block and restored after it, so one
call's id never leaks into the next call served by the same task. (Where a block per use costs
too much, the variable is set and reset around the same span directly: the segment store tags
each request it serves with the request's wire id, server/connection.py.)
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("pgc_request_id", default=None)
scope: ContextVar[str | None] = ContextVar("pgc_scope", default=None)
stream: ContextVar[str | None] = ContextVar("pgc_stream", default=None)

# Pravega's clients send their request ids as a decimal long; ours look the same, positive.
_ID_BITS = 63
MAX_REQUEST_ID_CHARS = 64


def new_request_id() -> str:
    return str(secrets.randbits(_ID_BITS))


def given_or_new(value: str | None) -> str:
    """A caller's id when it is printable and short (it ends up in every log line), else a new one."""
    if value and len(value) <= MAX_REQUEST_ID_CHARS and value.isprintable() and not value.isspace():
        return value.strip()
    return new_request_id()


def current_request_id() -> str | None:
    return request_id.get()


@contextmanager
def bound(
    *, request: str | None = None, scope_name: str | None = None, stream_name: str | None = None
) -> Iterator[None]:
    """Sets the given values (None leaves a value as it is) and restores them on exit."""
    tokens = []
    for var, value in ((request_id, request), (scope, scope_name), (stream, stream_name)):
        if value is not None:
            tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
