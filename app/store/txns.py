"""Transaction records in PostgreSQL (TxnStore port).

Active records are rows keyed by (stream, id) with a version; a status change and the
request that completes it are one statement, so no OPEN->COMMITTING move can exist without
its commit request. Completed records are insert-only and garbage-collected by age.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from app.domain.errors import IllegalState, NotFound
from app.domain.records import Versioned
from app.domain.requests import NewRequest
from app.domain.txns import CompletedTxn, TxnId, TxnRecord, TxnStatus
from app.ports import CommitBatch, CommittingRecord, CreatedTxn, ExpiredTxn, TxnLookup
from app.store import queries
from app.store.batching import Coalescer
from app.store.db import Database, Row
from app.store.errors import conflict_or_missing

_SQL = queries.load("txns")
NO_EPOCH = -1
T = TypeVar("T")
R = TypeVar("R")


def _record(row: Row) -> Versioned[TxnRecord]:
    return Versioned(
        TxnRecord(
            txn=TxnId(row["txn_high"], row["txn_low"]),
            epoch=row["epoch"],
            status=TxnStatus(row["status"]),
            creation_time=row["creation_time"],
            lease_ms=row["lease_ms"],
            lease_expiry=row["lease_expiry"],
            max_exec_expiry=row["max_exec_expiry"],
            writer_id=row["writer_id"],
            commit_time=row["commit_time"],
            commit_order=row["commit_order"],
        ),
        row["version"],
    )


def _halves(txns: Sequence[TxnId]) -> tuple[list[int], list[int]]:
    return [t.high for t in txns], [t.low for t in txns]


class _Ping(NamedTuple):
    scope: str
    name: str
    txn_high: int
    txn_low: int
    now_ms: int
    lease_ms: int
    max_lease_ms: int


def _ping_key(ping: _Ping) -> tuple[str, str, int, int]:
    return ping.scope, ping.name, ping.txn_high, ping.txn_low


class _Create(NamedTuple):
    scope: str
    name: str
    epoch: int | None
    now_ms: int
    lease_ms: int
    max_exec_expiry: int


class _Get(NamedTuple):
    scope: str
    name: str
    txn_high: int
    txn_low: int


class _Move(NamedTuple):
    scope: str
    name: str
    txn_high: int
    txn_low: int
    status: str
    writer_id: str | None
    commit_time: int | None
    processor: str
    kind: str
    requested_at: int


def _check_move(target: TxnStatus) -> None:
    if target not in (TxnStatus.COMMITTING, TxnStatus.ABORTING):
        raise ValueError(f"an open transaction moves to COMMITTING or ABORTING, not {target.value}")


def _created(ask: _Create, row: Row | None) -> CreatedTxn:
    """One caller's outcome from its row (None or no stream id: the stream does not exist)."""
    if row is None or row["stream_id"] is None:
        raise NotFound(f"stream {ask.scope}/{ask.name} not found")
    if row["txn_low"] is None:
        raise IllegalState(f"stream {ask.scope}/{ask.name} is {row['state']}: no new transactions")
    return CreatedTxn(
        TxnId(row["txn_high"], row["txn_low"]), row["rollover_size_bytes"], row["epoch"], row["stream_id"]
    )


def _lookup(ask: _Get, row: Row | None) -> TxnLookup:
    if row is None:
        raise NotFound(f"stream {ask.scope}/{ask.name} not found")
    txn = TxnId(ask.txn_high, ask.txn_low)
    active = None if row["status"] is None else _record(row)
    completed = (
        None
        if row["completed_status"] is None
        else CompletedTxn(txn, TxnStatus(row["completed_status"]), row["completion_time"])
    )
    return TxnLookup(active, completed)


def _by_ordinal(
    found: Mapping[int, Row], asks: Sequence[T], outcome: Callable[[T, Row | None], R]
) -> list[R | Exception]:
    """Each ask's own outcome (or its own error) from the batch's rows keyed by ordinal."""
    results: list[R | Exception] = []
    for ordinal, ask in enumerate(asks, start=1):
        try:
            results.append(outcome(ask, found.get(ordinal)))
        except (NotFound, IllegalState) as exc:
            results.append(exc)
    return results


class PgTxnStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        # Writers ping their transactions all the time, many at once: the pings of one loop turn
        # are one statement; so are the creations of one turn, and the reads of one turn (each
        # creation reads its row back once its segments exist).
        self._pings: Coalescer[_Ping, bool] = Coalescer(self._ping_one, self._ping_many)
        self._creates: Coalescer[_Create, CreatedTxn] = Coalescer(self._create_one, self._create_many)
        self._gets: Coalescer[_Get, TxnLookup] = Coalescer(self._get_one, self._get_many)
        # Commits (and aborts) of OPEN transactions arrive many at once too: one statement per
        # loop turn, so one commit (one WAL flush) carries them all.
        self._moves: Coalescer[_Move, int | None] = Coalescer(self._move_one, self._move_many)

    async def create_txn(
        self, scope: str, name: str, epoch: int | None, now_ms: int, lease_ms: int, max_exec_expiry: int
    ) -> CreatedTxn:
        return await self._creates(_Create(scope, name, epoch, now_ms, lease_ms, max_exec_expiry))

    async def _create_one(self, ask: _Create) -> CreatedTxn:
        return _created(ask, await self._db.fetchrow(_SQL["create_txn"], *ask))

    async def _create_many(self, asks: Sequence[_Create]) -> list[CreatedTxn | Exception]:
        return _by_ordinal(await self._fetch_batch("create_txns", asks), asks, _created)

    async def get_txn(self, scope: str, name: str, txn: TxnId) -> TxnLookup:
        return await self._gets(_Get(scope, name, txn.high, txn.low))

    async def _get_one(self, ask: _Get) -> TxnLookup:
        return _lookup(ask, await self._db.fetchrow(_SQL["get_txn"], *ask))

    async def _get_many(self, asks: Sequence[_Get]) -> list[TxnLookup | Exception]:
        return _by_ordinal(await self._fetch_batch("get_txns", asks), asks, _lookup)

    async def _exists(self, scope: str, name: str, txn: TxnId) -> bool:
        row = await self._db.fetchrow(_SQL["get_txn"], scope, name, txn.high, txn.low)
        return row is not None and row["status"] is not None

    async def extend_lease(
        self, scope: str, name: str, txn: TxnId, lease_ms: int, lease_expiry: int, expected_version: int
    ) -> int:
        version = await self._db.fetchval(
            _SQL["extend_lease"], scope, name, txn.high, txn.low, lease_expiry, lease_ms, expected_version
        )
        if version is None:
            raise conflict_or_missing(await self._exists(scope, name, txn), f"transaction {txn}")
        return int(version)

    async def extend_open_lease(
        self, scope: str, name: str, txn: TxnId, lease_ms: int, now_ms: int, max_lease_ms: int
    ) -> bool:
        return await self._pings(_Ping(scope, name, txn.high, txn.low, now_ms, lease_ms, max_lease_ms))

    async def _ping_one(self, ping: _Ping) -> bool:
        version = await self._db.fetchval(_SQL["extend_open_lease"], *ping)
        return version is not None

    async def _ping_many(self, batch: Sequence[_Ping]) -> list[bool | Exception]:
        extended = await self._fetch_batch("extend_open_leases", batch)
        # A transaction pinged twice in one batch is updated once: the ping that lost is
        # answered by the lease the winner set when it reaches as far as the loser asked (else
        # the loser reads the record on its own). Without this, N concurrent pings of one
        # transaction took N rounds of conflicting writes on the slow path.
        reached = {
            _ping_key(batch[ordinal - 1]): int(row["lease_expiry"]) for ordinal, row in extended.items()
        }
        return [
            ordinal in extended
            or (
                ping.lease_ms <= ping.max_lease_ms
                and reached.get(_ping_key(ping), -1) >= ping.now_ms + ping.lease_ms
            )
            for ordinal, ping in enumerate(batch, start=1)
        ]

    async def move_txn(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        expected_version: int,
        request: NewRequest,
        *,
        writer_id: str | None = None,
        commit_time: int | None = None,
    ) -> int:
        version = await self._move(
            scope, name, txn, target, expected_version, request, writer_id, commit_time
        )
        if version is None:
            raise conflict_or_missing(await self._exists(scope, name, txn), f"transaction {txn}")
        return version

    async def move_open_txn(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        request: NewRequest,
        *,
        writer_id: str | None = None,
        commit_time: int | None = None,
    ) -> int | None:
        _check_move(target)
        return await self._moves(
            _Move(
                scope,
                name,
                txn.high,
                txn.low,
                target.value,
                writer_id,
                commit_time,
                request.processor.value,
                request.kind.value,
                request.created_at,
            )
        )

    async def _move_one(self, ask: _Move) -> int | None:
        version = await self._db.fetchval(
            _SQL["move_txn"],
            ask.scope,
            ask.name,
            ask.txn_high,
            ask.txn_low,
            ask.status,
            None,
            ask.writer_id,
            ask.commit_time,
            ask.processor,
            ask.kind,
            ask.requested_at,
        )
        return None if version is None else int(version)

    async def _move_many(self, asks: Sequence[_Move]) -> list[int | Exception | None]:
        moved = await self._fetch_batch("move_open_txns", asks)
        versions = {ordinal: int(row["version"]) for ordinal, row in moved.items()}
        return [versions.get(ordinal) for ordinal in range(1, len(asks) + 1)]

    async def _fetch_batch(self, query: str, asks: Sequence[tuple[Any, ...]]) -> dict[int, Row]:
        """A batched statement's rows by the ordinal (from 1) of the ask each answers; the
        statement takes the asks as one array per field."""
        columns = [list(column) for column in zip(*asks, strict=True)]
        return {row["ord"]: row for row in await self._db.fetch(_SQL[query], *columns)}

    async def _move(
        self,
        scope: str,
        name: str,
        txn: TxnId,
        target: TxnStatus,
        expected_version: int | None,
        request: NewRequest,
        writer_id: str | None,
        commit_time: int | None,
    ) -> int | None:
        _check_move(target)
        version = await self._db.fetchval(
            _SQL["move_txn"],
            scope,
            name,
            txn.high,
            txn.low,
            target.value,
            expected_version,
            writer_id,
            commit_time,
            request.processor.value,
            request.kind.value,
            request.created_at,
        )
        return None if version is None else int(version)

    async def complete_abort(
        self, scope: str, name: str, txn: TxnId, expected_version: int, now_ms: int
    ) -> bool:
        gone = await self._db.fetchval(
            _SQL["complete_abort"], scope, name, txn.high, txn.low, expected_version, now_ms
        )
        if gone:
            return True
        if await self._exists(scope, name, txn):
            raise conflict_or_missing(True, f"transaction {txn}")
        return False

    async def list_active(self, scope: str, name: str) -> list[Versioned[TxnRecord]]:
        rows = await self._db.fetch(_SQL["list_active"], scope, name)
        if not rows and not await self._db.fetchval(_SQL["stream_exists"], scope, name):
            raise NotFound(f"stream {scope}/{name} not found")
        return [_record(row) for row in rows]

    async def list_completed(self, scope: str, name: str, limit: int) -> list[CompletedTxn]:
        rows = await self._db.fetch(_SQL["list_completed"], scope, name, limit)
        if not rows and not await self._db.fetchval(_SQL["stream_exists"], scope, name):
            raise NotFound(f"stream {scope}/{name} not found")
        return [
            CompletedTxn(TxnId(r["txn_high"], r["txn_low"]), TxnStatus(r["status"]), r["completion_time"])
            for r in rows
        ]

    async def get_committing(self, scope: str, name: str) -> CommittingRecord:
        row = await self._db.fetchrow(_SQL["get_committing"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        if row["version"] is None:
            return CommittingRecord(None, None)
        if row["epoch"] == NO_EPOCH:
            return CommittingRecord(None, row["version"])
        rolling = row["rolling_active_epoch"]
        batch = CommitBatch(
            row["epoch"],
            tuple(TxnId(h, lo) for h, lo in zip(row["txn_highs"], row["txn_lows"], strict=True)),
            None if rolling == NO_EPOCH else rolling,
        )
        return CommittingRecord(batch, row["version"])

    async def next_commit_batch(self, scope: str, name: str, limit: int) -> CommitBatch | None:
        rows = await self._db.fetch(_SQL["next_commit_batch"], scope, name, limit)
        if not rows:
            return None
        return CommitBatch(rows[0]["epoch"], tuple(TxnId(r["txn_high"], r["txn_low"]) for r in rows))

    async def start_commit_batch(
        self, scope: str, name: str, batch: CommitBatch, expected_version: int | None
    ) -> int:
        highs, lows = _halves(batch.txns)
        sql = _SQL["start_commit_batch"]
        return await self._committing_write(sql, scope, name, batch.epoch, highs, lows, expected_version)

    async def set_rolling_epoch(self, scope: str, name: str, active_epoch: int, expected_version: int) -> int:
        sql = _SQL["set_rolling_epoch"]
        return await self._committing_write(sql, scope, name, active_epoch, expected_version)

    async def complete_commit_batch(
        self,
        scope: str,
        name: str,
        txns: Sequence[TxnId],
        expected_version: int,
        now_ms: int,
        state_version: int | None,
    ) -> int:
        highs, lows = _halves(txns)
        return await self._committing_write(
            _SQL["end_commit_batch"],
            scope,
            name,
            expected_version,
            highs,
            lows,
            "COMMITTED",
            state_version,
            False,
            now_ms,
        )

    async def abandon_commit_batch(
        self, scope: str, name: str, txns: Sequence[TxnId], expected_version: int, now_ms: int
    ) -> int:
        highs, lows = _halves(txns)
        return await self._committing_write(
            _SQL["end_commit_batch"],
            scope,
            name,
            expected_version,
            highs,
            lows,
            "ABORTED",
            None,
            True,
            now_ms,
        )

    async def _committing_write(self, sql: str, scope: str, name: str, *args: Any) -> int:
        """A version-checked write of the committing-transactions record; on no row, tells a
        missing stream (NotFound) from a lost race (WriteConflict)."""
        version = await self._db.fetchval(sql, scope, name, *args)
        if version is None:
            exists = await self._db.fetchval(_SQL["stream_exists"], scope, name)
            raise conflict_or_missing(bool(exists), f"committing-transactions record of {scope}/{name}")
        return int(version)

    async def expired(self, buckets: Sequence[int], cutoff_ms: int, limit: int) -> list[ExpiredTxn]:
        rows = await self._db.fetch(_SQL["expired"], list(buckets), cutoff_ms, limit)
        return [
            ExpiredTxn(
                r["scope"], r["name"], TxnId(r["txn_high"], r["txn_low"]), r["version"], r["lease_expiry"]
            )
            for r in rows
        ]

    async def next_expiry(self, buckets: Sequence[int]) -> int | None:
        value = await self._db.fetchval(_SQL["next_expiry"], list(buckets))
        return None if value is None else int(value)

    async def gc_completed(self, cutoff_ms: int) -> int:
        return int(await self._db.fetchval(_SQL["gc_completed"], cutoff_ms))
