"""Maps domain errors to gRPC status codes for errors not reported as status enums.

Deliberate differences from Java's controller, chosen so clients fail fast on bad input
instead of retrying for a minute: InvalidInput is INVALID_ARGUMENT (Java: INTERNAL/UNKNOWN),
and an unreachable metadata store is UNAVAILABLE (Java: INTERNAL); both codes' retry
behaviour in Pravega's clients matches their meaning.
"""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.domain import errors

_CODES: tuple[tuple[type[errors.DomainError], Status], ...] = (
    (errors.NotFound, Status.NOT_FOUND),
    (errors.AlreadyExists, Status.ALREADY_EXISTS),
    (errors.NotEmpty, Status.FAILED_PRECONDITION),
    (errors.WriteConflict, Status.FAILED_PRECONDITION),
    (errors.IllegalState, Status.INTERNAL),
    (errors.OperationNotAllowed, Status.PERMISSION_DENIED),
    (errors.InvalidInput, Status.INVALID_ARGUMENT),
    (errors.StoreUnavailable, Status.UNAVAILABLE),
    (errors.Timeout, Status.DEADLINE_EXCEEDED),
)


def grpc_error_for(exc: errors.DomainError) -> GRPCError:
    for kind, status in _CODES:
        if isinstance(exc, kind):
            return GRPCError(status, str(exc))
    return GRPCError(Status.UNKNOWN, str(exc))
