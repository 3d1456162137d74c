"""A Database that waits a little for PostgreSQL instead of failing at once when no connection can
be opened: the segment store's view of a failover or a restart. A planned switchover takes the
database away for a second or two; a request that fails meanwhile closes its client's connection,
and the client's retries back off (Pravega's Rust client: 1 ms, 10 ms, 100 ms, 1 s, then 10 s),
so a writer would stall for seconds after the database was back. Waiting for a connection instead
keeps the writer's request in hand, answered once the new primary takes it.

Only opening a connection is waited out: nothing was sent then, so trying again cannot apply a
write twice; the pool says so by raising NotLent (app/store/db.py), a StoreUnavailable. A failure
once a statement went out is the caller's, as before. A longer outage
ends the wait after `wait_s` with the same StoreUnavailable, and the client backs off as it
should."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

from app.store.db import Connection, Database, NotLent, Row

T = TypeVar("T")

# Between attempts to open a connection while PostgreSQL is away.
_RETRY_EVERY_S = 0.05


async def _patiently(call: Callable[[], Awaitable[T]], wait_s: float) -> T:
    """`call`, made again while the pool can lend no connection (nothing was sent then), for up
    to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await call()
        except NotLent:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(_RETRY_EVERY_S)


class PatientDatabase:
    """`db`'s calls, each on a connection opened within `wait_s` if one can be."""

    def __init__(self, db: Database, wait_s: float) -> None:
        self._db = db
        self._wait_s = wait_s

    def acquire(self) -> _PatientBlock:
        return _PatientBlock(self._db, self._wait_s)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self.acquire() as conn, conn.transaction():
            yield conn

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        return await _patiently(call, self._wait_s)

    async def fetch(self, query: str, *args: object) -> list[Row]:
        return await self._patiently(lambda: self._db.fetch(query, *args))

    async def fetchrow(self, query: str, *args: object) -> Row | None:
        return await self._patiently(lambda: self._db.fetchrow(query, *args))

    async def fetchval(self, query: str, *args: object) -> Any:
        return await self._patiently(lambda: self._db.fetchval(query, *args))

    async def execute(self, query: str, *args: object) -> str:
        return await self._patiently(lambda: self._db.execute(query, *args))

    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None:
        # A generator of arguments would be used up by a first try that never ran.
        listed = list(args)
        await self._patiently(lambda: self._db.executemany(command, listed))

    async def fetchmany(self, query: str, args: Iterable[Sequence[object]]) -> list[Row]:
        listed = list(args)
        return await self._patiently(lambda: self._db.fetchmany(query, listed))

    async def copy_records_to_table(
        self,
        table_name: str,
        *,
        records: Iterable[Sequence[object]],
        columns: Sequence[str] | None = None,
    ) -> str:
        listed = list(records)
        return await self._patiently(
            lambda: self._db.copy_records_to_table(table_name, records=listed, columns=columns)
        )

    async def close(self) -> None:
        """The pool is its owner's to close."""


class _PatientBlock:
    """One connection for a block (a transaction of the store's), waited for within `wait_s`. A
    class rather than a generator: it is cheaper to enter, and the data path enters many."""

    __slots__ = ("_block", "_db", "_wait_s")

    def __init__(self, db: Database, wait_s: float) -> None:
        self._db = db
        self._wait_s = wait_s
        self._block: AbstractAsyncContextManager[Connection] | None = None

    async def __aenter__(self) -> Connection:
        return await _patiently(self._enter_once, self._wait_s)

    async def _enter_once(self) -> Connection:
        block = self._db.acquire()
        conn = await block.__aenter__()
        self._block = block
        return conn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._block is not None
        await self._block.__aexit__(exc_type, exc, tb)
