"""The stores' typed view of PostgreSQL: a pool (`Database`), its connections (`Connection`) and
dedicated sessions, over asyncpg. Every call here turns a driver failure into the domain's error
(app/store/errors.py) exactly once, so store code never translates and never sees asyncpg.

Each query is one thin async call into asyncpg's own on a connection the pool's lender lends
(app/store/lending.py): no extra round trip, and per query only that call's coroutine and the
lending. Domain errors raised by store code inside a transaction block pass
through untouched; a failure to start or commit the block is translated like a query's. A block
that raised ends with its own exception even when its rollback or the give-back then fails (the
connection is lost, or closed because a query was given up on: app/store/uncancelled.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, NoReturn, Protocol, TypeVar

import asyncpg

from app.domain.errors import StoreUnavailable
from app.store import hosts
from app.store.dsn import connect_args
from app.store.errors import domain_error
from app.store.lending import ConnectionLender
from app.store.uncancelled import UncancelledConnection

T = TypeVar("T")


class Row(Protocol):
    """One result row (an asyncpg Record): by column name or position; iterating gives values."""

    def __getitem__(self, key: str | int, /) -> Any: ...
    def get(self, key: str, default: Any = None, /) -> Any: ...
    def keys(self) -> Iterator[str]: ...
    def values(self) -> Iterator[Any]: ...
    def items(self) -> Iterator[tuple[str, Any]]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...


class Queries(Protocol):
    """The query calls shared by a pool (one pooled connection per call) and a connection."""

    async def fetch(self, query: str, *args: object) -> list[Row]: ...
    async def fetchrow(self, query: str, *args: object) -> Row | None: ...
    async def fetchval(self, query: str, *args: object) -> Any: ...
    async def execute(self, query: str, *args: object) -> str: ...
    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None: ...
    async def fetchmany(self, query: str, args: Iterable[Sequence[object]]) -> list[Row]: ...
    async def copy_records_to_table(
        self,
        table_name: str,
        *,
        records: Iterable[Sequence[object]],
        columns: Sequence[str] | None = None,
    ) -> str: ...


class Connection(Queries, Protocol):
    def transaction(self) -> AbstractAsyncContextManager[None]:
        """A transaction block, or a savepoint when one is already open on this connection:
        committed when the block ends normally, rolled back when it raises."""
        ...


class Database(Queries, Protocol):
    def acquire(self) -> AbstractAsyncContextManager[Connection]:
        """One pooled connection for the block (several statements, same session)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[Connection]:
        """A pooled connection with a transaction open on it for the block."""
        ...

    async def close(self) -> None: ...


def _raise_translated(exc: Exception) -> NoReturn:
    """Re-raises a driver failure as the domain error it stands for; anything else (a domain
    error from store code included) goes on unchanged."""
    error = domain_error(exc)
    if error is None:
        raise exc
    raise error from exc


class NotLent(StoreUnavailable):
    """No connection could be lent (none was idle, and opening one failed): nothing was sent, so
    the call may be made again (app/store/patient_db.py waits out a failover so)."""


def _raise_not_lent(exc: Exception) -> NoReturn:
    error = domain_error(exc)
    if isinstance(error, StoreUnavailable):
        refused = NotLent(*error.args)
        for note in getattr(error, "__notes__", ()):
            refused.add_note(note)
        raise refused from exc
    _raise_translated(exc)


class _Calls:
    """The query calls, made on an asyncpg pool or connection (both have them, same signatures)."""

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        self._target = target

    async def fetch(self, query: str, *args: object) -> list[Row]:
        try:
            rows: list[Row] = await self._target.fetch(query, *args)
        except Exception as exc:
            _raise_translated(exc)
        return rows

    async def fetchrow(self, query: str, *args: object) -> Row | None:
        try:
            row: Row | None = await self._target.fetchrow(query, *args)
        except Exception as exc:
            _raise_translated(exc)
        return row

    async def fetchval(self, query: str, *args: object) -> Any:
        try:
            return await self._target.fetchval(query, *args)
        except Exception as exc:
            _raise_translated(exc)

    async def execute(self, query: str, *args: object) -> str:
        try:
            status: str = await self._target.execute(query, *args)
        except Exception as exc:
            _raise_translated(exc)
        return status

    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None:
        try:
            await self._target.executemany(command, args)
        except Exception as exc:
            _raise_translated(exc)

    async def fetchmany(self, query: str, args: Iterable[Sequence[object]]) -> list[Row]:
        """`query` once per argument list, pipelined (one round trip for all), the rows of all."""
        try:
            rows: list[Row] = await self._target.fetchmany(query, args)
        except Exception as exc:
            _raise_translated(exc)
        return rows

    async def copy_records_to_table(
        self,
        table_name: str,
        *,
        records: Iterable[Sequence[object]],
        columns: Sequence[str] | None = None,
    ) -> str:
        try:
            status: str = await self._target.copy_records_to_table(
                table_name, records=records, columns=columns
            )
        except Exception as exc:
            _raise_translated(exc)
        return status


class PgConnection(_Calls):
    """Connection over an asyncpg connection (a pooled one's proxy, or a dedicated one)."""

    __slots__ = ()

    def transaction(self) -> _Transaction:
        return _Transaction(self._target)


class _TranslatedBlock:
    """One of asyncpg's async blocks, opened by `open_block`, with the failures of its entry and
    exit translated like queries. The block's own exception propagates as asyncpg lets it."""

    __slots__ = ("_block", "_open_block")

    def __init__(self, open_block: Callable[[], Any]) -> None:
        self._open_block = open_block
        self._block: Any = None

    async def _enter(self) -> Any:
        try:
            self._block = self._open_block()
            return await self._block.__aenter__()
        except Exception as exc:
            _raise_translated(exc)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._block.__aexit__(exc_type, exc, tb)
        except Exception as error:
            if exc is not None:
                # The block failed already, and its connection with it (a rollback fails only
                # there, and the server rolls back a lost connection's transaction itself): the
                # block's own exception goes on, a cancellation above all, which would otherwise
                # become an error its task retries instead of ending.
                return
            _raise_translated(error)


class _Transaction(_TranslatedBlock):
    """asyncpg's transaction block: a failing BEGIN, COMMIT or ROLLBACK is translated (e.g. a
    deferred constraint at COMMIT)."""

    __slots__ = ()

    def __init__(self, conn: Any) -> None:
        super().__init__(conn.transaction)

    async def __aenter__(self) -> None:
        await self._enter()


class PgSession(PgConnection):
    """A dedicated connection outside the pool (advisory locks, seeding): its session state is
    its own, and its end is observable."""

    __slots__ = ()

    def is_closed(self) -> bool:
        return bool(self._target.is_closed())

    def terminate(self) -> None:
        """Drops the connection at once, as a crash would (the server ends the session)."""
        self._target.terminate()

    def add_termination_listener(self, callback: Callable[[PgSession], None]) -> None:
        """`callback(this session)` once the connection is gone, whatever ended it."""
        self._target.add_termination_listener(lambda _conn: callback(self))

    async def close(self) -> None:
        try:
            await self._target.close()
        except Exception as exc:
            _raise_translated(exc)


class PgDatabase:
    """Database over an asyncpg pool: each query call borrows a connection for that call only,
    lent by app/store/lending.py (which spares most borrowings a round through the pool)."""

    __slots__ = ("_lender", "_pool")

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._lender = ConnectionLender(pool)

    async def _on_lent(self, call: Callable[[Any], Awaitable[T]]) -> T:
        try:
            connection = await self._lender.lend()
        except Exception as exc:
            _raise_not_lent(exc)
        try:
            try:
                result = await call(connection)
            except BaseException:
                # The call's own exception goes on even if giving back fails (_TranslatedBlock).
                with contextlib.suppress(Exception):
                    await self._lender.give_back(connection, clean=False)
                raise
            await self._lender.give_back(connection, clean=True)
        except Exception as exc:
            _raise_translated(exc)
        return result

    async def fetch(self, query: str, *args: object) -> list[Row]:
        return await self._on_lent(lambda connection: connection.fetch(query, *args))

    async def fetchrow(self, query: str, *args: object) -> Row | None:
        return await self._on_lent(lambda connection: connection.fetchrow(query, *args))

    async def fetchval(self, query: str, *args: object) -> Any:
        return await self._on_lent(lambda connection: connection.fetchval(query, *args))

    async def execute(self, query: str, *args: object) -> str:
        return await self._on_lent(lambda connection: connection.execute(query, *args))

    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None:
        await self._on_lent(lambda connection: connection.executemany(command, args))

    async def fetchmany(self, query: str, args: Iterable[Sequence[object]]) -> list[Row]:
        """`query` once per argument list, pipelined (one round trip for all), the rows of all."""
        return await self._on_lent(lambda connection: connection.fetchmany(query, args))

    async def copy_records_to_table(
        self,
        table_name: str,
        *,
        records: Iterable[Sequence[object]],
        columns: Sequence[str] | None = None,
    ) -> str:
        return await self._on_lent(
            lambda connection: connection.copy_records_to_table(table_name, records=records, columns=columns)
        )

    def acquire(self) -> _Acquired:
        return _Acquired(self._lender)

    def pool_use(self) -> tuple[int, int, int]:
        """(connections open, of them idle, the pool's bound): the metrics' view of the pool."""
        pool = self._pool
        return pool.get_size(), pool.get_idle_size() + self._lender.idle(), pool.get_max_size()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PgConnection]:
        async with self.acquire() as conn, conn.transaction():
            yield conn

    async def close(self) -> None:
        try:
            await self._lender.close()
            await self._pool.close()
        except Exception as exc:
            _raise_translated(exc)


class _Acquired:
    """One lent connection for a block: waiting for it (or opening one) and giving it back are
    translated; a closed pool or an unreachable server is StoreUnavailable. The block's own
    exception propagates as it is."""

    __slots__ = ("_connection", "_lender")

    def __init__(self, lender: ConnectionLender) -> None:
        self._lender = lender
        self._connection: Any = None

    async def __aenter__(self) -> PgConnection:
        try:
            self._connection = await self._lender.lend()
        except Exception as exc:
            _raise_not_lent(exc)
        return PgConnection(self._connection)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._lender.give_back(self._connection, clean=exc_type is None)
        except Exception as error:
            if exc is None:  # else the block's own exception goes on (_TranslatedBlock)
                _raise_translated(error)


def _arguments(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The URL's connection arguments (app/store/dsn.py) under the caller's `options`; a
    `server_settings` option adds to the URL's (its application_name yields to the URL's)."""
    extra = dict(options.pop("server_settings", None) or {})
    arguments = connect_args(url, application_name=extra.pop("application_name", None))
    if extra:
        arguments["server_settings"] = {**extra, **arguments.get("server_settings", {})}
    return {**arguments, **options}


async def open_pool(url: str, **options: Any) -> PgDatabase:
    """An asyncpg pool (`options` as asyncpg.create_pool takes them) behind the Database calls."""
    arguments = _arguments(url, options)
    try:
        pool = asyncpg.create_pool(connect=hosts.connect, connection_class=UncancelledConnection, **arguments)
        return PgDatabase(await pool)
    except Exception as exc:
        _raise_translated(exc)


async def connect(url: str, **options: Any) -> PgSession:
    """A dedicated connection (`options` as asyncpg.connect takes them: `timeout` bounds the
    connecting, `command_timeout` every query on it)."""
    arguments = _arguments(url, options)
    try:
        return PgSession(await hosts.connect(**arguments))
    except Exception as exc:
        _raise_translated(exc)
