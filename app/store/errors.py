"""The one mapping from asyncpg's failures to the domain's closed error set (applied by
app/store/db.py to every query). Callers above the store never see an asyncpg exception; a
dropped connection, a server restart or a failover all surface as StoreUnavailable (retryable).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

from app.domain import errors

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


def domain_error(exc: BaseException) -> errors.DomainError | None:
    """The domain error a driver failure stands for; None for anything else (a domain error
    included), which the caller lets propagate unchanged. The order of the checks matters: the
    connection failures are PostgresErrors too. A timeout (TimeoutError is an OSError) is
    "unavailable" like a lost connection."""
    if isinstance(exc, errors.DomainError):
        return None
    if isinstance(exc, asyncpg.UniqueViolationError):
        return errors.AlreadyExists(exc.detail or str(exc))
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return errors.WriteConflict(f"a referenced record changed concurrently: {exc}")
    if isinstance(exc, (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)):
        return errors.WriteConflict(str(exc))
    if isinstance(exc, _UNAVAILABLE):
        return errors.StoreUnavailable(f"metadata store unavailable: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        return errors.StoreUnavailable(f"metadata store error: {exc}")
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
