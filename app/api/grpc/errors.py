"""Turns a domain error into the gRPC error its row of app/api/errors.py names; RPCs whose
outcomes are status enums of the contract answer those instead and never come here.

gRPC carries the error's text in a response header, so the text is bounded here: an error that
quotes a client's input (a name, an id, a token) must not grow with it, or the answer itself breaks.
"""

from __future__ import annotations

from grpclib.exceptions import GRPCError

from app.api.errors import message_for, row_for
from app.domain.errors import DomainError

MAX_DETAIL_CHARS = 1000


def grpc_error_for(exc: DomainError) -> GRPCError:
    return GRPCError(row_for(exc).grpc, bounded(message_for(exc)))


def bounded(detail: str) -> str:
    if len(detail) <= MAX_DETAIL_CHARS:
        return detail
    return f"{detail[:MAX_DETAIL_CHARS]}… ({len(detail)} characters)"
