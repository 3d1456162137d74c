"""The one mapping from asyncpg's failures to the domain's closed error set (applied by
app/store/db.py to every query). Callers above the store never see an asyncpg exception; a
dropped connection, a server restart or a failover all surface as StoreUnavailable (retryable).

Invariant: the message of every error made here is fixed, client-safe text. The driver's own
text (SQL, constraint and table names, hosts, ports, paths) stays on the chained `__cause__` and
in a note on the error (`__notes__`), which the surfaces log under a correlation id and never send.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
from asyncpg.exceptions._base import DataError as ArgumentNotEncodable

from app.domain import errors

UNAVAILABLE = "the metadata store is unavailable; retry"
SLOW = "the metadata store did not answer in time; retry"
FAILED = "the metadata store could not complete the operation; retry"
FULL = "the metadata store is out of disk space; retry once space is freed"
CHANGED = "the record changed concurrently; retry"
EXISTS = "the record exists already"
DRIVER_NOTE = "metadata store driver: "

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.ConnectionFailureError,
    asyncpg.InternalClientError,
    ConnectionError,
    OSError,
)

# PostgreSQL's words when a file it writes cannot grow (with SQLSTATE 53100 disk_full, or in the
# text of an I/O error that reached the client under another code).
_NO_SPACE = "No space left on device"

# SQLSTATE class 22 ("data exception") is a value the server refuses: the caller's input, not an
# outage. The few that input can reach get a message in the caller's terms; the rest share one.
_BAD_VALUE: dict[str, str] = {
    "22021": "a text value holds a character that cannot be stored (such as NUL)",
    "22P05": "a text value holds a character that cannot be stored (such as NUL)",
    "22003": "a number is out of the range that can be stored",
    "22001": "a text value is too long to be stored",
    "22008": "a date or time is out of the range that can be stored",
}
_BAD_VALUE_DEFAULT = "a value cannot be stored as given"


def domain_error(exc: BaseException) -> errors.DomainError | None:
    """The domain error a driver failure stands for, with the driver's text in a note for the
    log; None for anything else (a domain error included), which the caller lets propagate
    unchanged."""
    error = _domain_error(exc)
    if error is not None:
        # The log's copy of what happened (PEP 678 note); the message itself stays generic.
        error.add_note(f"{DRIVER_NOTE}{type(exc).__name__}: {exc}")
    return error


def _domain_error(exc: BaseException) -> errors.DomainError | None:
    """The order of the checks matters: the connection failures are PostgresErrors too, and the
    driver's refusal to encode an argument (asyncpg's client-side DataError) is an
    InterfaceError. A timeout (TimeoutError is an OSError) is "unavailable", like a lost
    connection, and says so."""
    if isinstance(exc, errors.DomainError):
        return None
    if isinstance(exc, asyncpg.UniqueViolationError):
        return errors.AlreadyExists(EXISTS)
    if isinstance(
        exc, (asyncpg.ForeignKeyViolationError, asyncpg.SerializationError, asyncpg.DeadlockDetectedError)
    ):
        return errors.WriteConflict(CHANGED)
    if isinstance(exc, asyncpg.DataError):  # SQLSTATE class 22, raised by the server
        return errors.InvalidInput(_BAD_VALUE.get(exc.sqlstate, _BAD_VALUE_DEFAULT))
    if isinstance(exc, ArgumentNotEncodable):  # an argument the driver cannot encode
        return errors.InvalidInput(_BAD_VALUE_DEFAULT)
    if isinstance(exc, (asyncpg.QueryCanceledError, TimeoutError)):
        return errors.StoreUnavailable(SLOW)
    if isinstance(exc, _UNAVAILABLE):
        return errors.StoreUnavailable(UNAVAILABLE)
    if isinstance(exc, asyncpg.DiskFullError) or (
        isinstance(exc, asyncpg.PostgresError) and _NO_SPACE in str(exc)
    ):
        # Retryable as any outage, but named: the operator, not a retry, brings the space back.
        return errors.StoreUnavailable(FULL)
    if isinstance(exc, asyncpg.PostgresError):
        return errors.StoreUnavailable(FAILED)
    return None


@contextmanager
def translated() -> Iterator[None]:
    """For the few driver calls made outside app/store/db.py's wrapper (the analysts' admin
    session, migrations): the same translation as every wrapped call."""
    try:
        yield
    except Exception as exc:
        error = domain_error(exc)
        if error is None:
            raise
        raise error from exc


def conflict_or_missing(exists: bool, what: str) -> errors.DomainError:
    """A conditional write touched no row: the record is gone, or its version moved on."""
    if not exists:
        return errors.NotFound(f"{what} not found")
    return errors.WriteConflict(f"{what} was changed concurrently")
