"""The closed set of domain errors every layer speaks.

Adapters translate their own failures into exactly these; the API layers map exactly these
to wire statuses. Nothing else may cross a layer boundary as an expected failure.
"""


class DomainError(Exception):
    """Base of every expected failure; the message is safe to show to a caller."""


class NotFound(DomainError):
    """A scope, stream, epoch or other record does not exist."""


class AlreadyExists(DomainError):
    """A record with the same key exists already."""


class WriteConflict(DomainError):
    """A versioned write lost a race; retrying from a fresh read is safe."""


class IllegalState(DomainError):
    """The record exists but is in a state where the operation cannot apply."""


class OperationNotAllowed(DomainError):
    """A stream state transition that the state machine forbids."""


class NotEmpty(DomainError):
    """A container record still holds children (a scope with streams)."""


class InvalidInput(DomainError):
    """The caller's input breaks a rule (a name, a policy, a range)."""


class StoreUnavailable(DomainError):
    """The metadata store cannot be reached; retryable."""


class Timeout(DomainError):
    """A workflow the caller waits for did not complete in time (Pravega's 2-minute bound)."""


class FinalFailure(DomainError):
    """A workflow failed in a way running it again cannot fix; its request is parked, the
    stream's state restored, and an operator may retry or drop it."""
