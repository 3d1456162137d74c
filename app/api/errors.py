"""The one table of what a domain error answers on the wire: its gRPC status, its HTTP status and
whether the same request may succeed if sent again. The gRPC and REST layers both look errors up
here and keep no mapping of their own, so an error means the same thing to a client and to an
operator. docs/errors.md explains every row; a test keeps that document equal to this table."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from http import HTTPStatus

from grpclib.const import Status

from app.domain import errors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorRow:
    error: type[errors.DomainError]
    grpc: Status
    http: HTTPStatus
    # True when sending the same request again later may succeed without the caller changing
    # anything; REST then adds Retry-After, and every gRPC code chosen for such a row is one
    # Pravega's Java and Rust clients retry.
    retryable: bool


ERROR_TABLE: tuple[ErrorRow, ...] = (
    ErrorRow(errors.NotFound, Status.NOT_FOUND, HTTPStatus.NOT_FOUND, retryable=False),
    ErrorRow(errors.AlreadyExists, Status.ALREADY_EXISTS, HTTPStatus.CONFLICT, retryable=False),
    ErrorRow(errors.InvalidInput, Status.INVALID_ARGUMENT, HTTPStatus.BAD_REQUEST, retryable=False),
    ErrorRow(errors.NotEmpty, Status.FAILED_PRECONDITION, HTTPStatus.PRECONDITION_FAILED, retryable=False),
    ErrorRow(errors.WriteConflict, Status.FAILED_PRECONDITION, HTTPStatus.CONFLICT, retryable=True),
    ErrorRow(errors.IllegalState, Status.FAILED_PRECONDITION, HTTPStatus.CONFLICT, retryable=True),
    ErrorRow(errors.OperationNotAllowed, Status.FAILED_PRECONDITION, HTTPStatus.CONFLICT, retryable=True),
    ErrorRow(errors.StoreUnavailable, Status.UNAVAILABLE, HTTPStatus.SERVICE_UNAVAILABLE, retryable=True),
    ErrorRow(errors.Timeout, Status.DEADLINE_EXCEEDED, HTTPStatus.GATEWAY_TIMEOUT, retryable=True),
    ErrorRow(errors.FinalFailure, Status.FAILED_PRECONDITION, HTTPStatus.CONFLICT, retryable=False),
    # Reached only by a domain error that has no row of its own: a fault of ours, answered as
    # both surfaces answer any unexpected failure.
    ErrorRow(errors.DomainError, Status.INTERNAL, HTTPStatus.INTERNAL_SERVER_ERROR, retryable=False),
)

_BY_CLASS: dict[type, ErrorRow] = {row.error: row for row in ERROR_TABLE}

UNMAPPED = _BY_CLASS[errors.DomainError]


def message_for(exc: errors.DomainError) -> str:
    """The text both surfaces send. Domain messages are written to be shown to a caller; what an
    adapter noted on the error for the log (a driver's failure: SQL, hosts, ports, in the error's
    `__notes__`) is logged here under a correlation id, and only the id travels with the
    message, so an operator can find the one from the other."""
    text = str(exc) or type(exc).__name__
    notes = getattr(exc, "__notes__", None)
    if not notes:
        return text
    ref = secrets.token_hex(6)
    # One line, no traceback: an outage fails every call, and the log must stay readable.
    log.warning("error %s: %s (%s)", ref, text, "; ".join(str(note) for note in notes))
    return f"{text} (error id {ref})"


def row_for(exc: errors.DomainError) -> ErrorRow:
    """The row of the nearest class in the exception's MRO: a subclass answers as its parent."""
    for cls in type(exc).__mro__:
        row = _BY_CLASS.get(cls)
        if row is not None:
            return row
    raise AssertionError(f"{type(exc).__name__} is not a DomainError")  # DomainError has a row
