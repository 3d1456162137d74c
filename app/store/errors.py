"""The one place where asyncpg's failures become the domain's closed error set.

Callers above the store never see an asyncpg exception; a dropped connection, a server
restart or a failover all surface as StoreUnavailable, which is retryable.
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


@contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except errors.DomainError:
        raise
    except asyncpg.UniqueViolationError as exc:
        raise errors.AlreadyExists(exc.detail or str(exc)) from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise errors.WriteConflict(f"a referenced record changed concurrently: {exc}") from exc
    except (asyncpg.SerializationError, asyncpg.DeadlockDetectedError) as exc:
        raise errors.WriteConflict(str(exc)) from exc
    except _UNAVAILABLE as exc:
        raise errors.StoreUnavailable(f"metadata store unavailable: {exc}") from exc
    except TimeoutError as exc:
        raise errors.StoreUnavailable("metadata store did not answer in time") from exc
    except asyncpg.PostgresError as exc:
        raise errors.StoreUnavailable(f"metadata store error: {exc}") from exc


def conflict_or_missing(exists: bool, what: str) -> errors.DomainError:
    """A conditional write touched no row: the record is gone, or its version moved on."""
    if not exists:
        return errors.NotFound(f"{what} not found")
    return errors.WriteConflict(f"{what} was changed concurrently")
