"""Writes generated histories (`pgcontroller dev seed`, app/dev/history_gen.py) straight into
the tables with COPY, a group of whole streams per transaction.

A crash or an error rolls back only the group in flight, so the database holds complete streams
or none of a stream, and `resume` can skip what was committed. Nothing is disabled: constraints,
indexes and triggers all stay. COPY fires row triggers, so the streams.name_hash trigger sets
the value computed here (the same Java hash); no trigger fires on insert into the other tables.
Transaction ids and commit orders come from the database's own sequences, reserved per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from app.dev.history_gen import (
    COMMIT_ORDER_PENDING,
    Rows,
    SeedSpec,
    StreamHistory,
    StreamIds,
    StreamSlot,
    scope_names,
    stream_slots,
)
from app.domain.errors import AlreadyExists, IllegalState, InvalidInput
from app.domain.ids import transaction_segment_name
from app.domain.names import mark_stream_name
from app.domain.records import ScopeState
from app.store import queries
from app.store.db import Connection, PgSession, connect
from app.store.errors import translated
from app.store.migrate import ensure_schema
from app.store.pool import asyncpg_dsn

_SQL = queries.load("seed")

# Column order of each Rows list (the generator documents the same order per table).
COLUMNS: dict[str, tuple[str, ...]] = {
    "streams": ("id", "scope", "name", "creation_time", "name_hash"),
    "stream_configs": (
        "stream_id",
        "scale_type",
        "target_rate",
        "scale_factor",
        "min_num_segments",
        "retention_type",
        "retention_param",
        "retention_max",
        "tags",
        "timestamp_aggregation_timeout",
        "rollover_size_bytes",
        "updating",
        "version",
    ),
    "stream_states": ("stream_id", "state", "version"),
    "stream_current_epochs": ("stream_id", "epoch", "version"),
    "stream_truncations": (
        "stream_id",
        "stream_cut",
        "span",
        "deleted_segments",
        "to_delete",
        "size_till",
        "updating",
        "version",
    ),
    "stream_epoch_transitions": (
        "stream_id",
        "active_epoch",
        "time",
        "segments_to_seal",
        "new_segment_ids",
        "new_key_starts",
        "new_key_ends",
        "version",
    ),
    "stream_tags": ("scope", "tag", "stream", "stream_id"),
    "epochs": (
        "stream_id",
        "epoch",
        "reference_epoch",
        "creation_time",
        "splits",
        "merges",
        "segment_ids",
        "key_starts",
        "key_ends",
        "segment_creation_times",
        "sealed_segments",
        "created_segments",
    ),
    "segments": (
        "stream_id",
        "segment_id",
        "number",
        "creation_epoch",
        "creation_time",
        "key_start",
        "key_end",
        "sealed_epoch",
        "version",
    ),
    "sealed_size_shards": ("stream_id", "shard", "sizes", "version"),
    "retention_set": ("stream_id", "recording_time", "recording_size", "stream_cut"),
    "truncation_history": (
        "stream_id",
        "completed_at",
        "stream_cut",
        "truncated_bytes",
        "total_truncated_bytes",
        "deleted_segments",
    ),
    "completed_txns": ("stream_id", "txn_high", "txn_low", "status", "completion_time"),
    "completed_txn_details": (
        "stream_id",
        "txn_high",
        "txn_low",
        "epoch",
        "creation_time",
        "lease_ms",
        "lease_expiry",
        "max_exec_expiry",
        "writer_id",
        "commit_time",
        "commit_order",
        "requested_at",
    ),
    "transactions": (
        "stream_id",
        "txn_high",
        "txn_low",
        "epoch",
        "bucket",
        "status",
        "creation_time",
        "lease_ms",
        "lease_expiry",
        "max_exec_expiry",
        "writer_id",
        "commit_time",
        "commit_order",
        "requested_at",
        "version",
    ),
    "embedded_segments": (
        "name",
        "kind",
        "length",
        "start_offset",
        "sealed",
        "scale_type",
        "target_rate",
        "rollover_size_bytes",
        "key_length",
        "created_at",
        "version",
    ),
}
# Their third column is a transaction ordinal until flushed.
_TXN_TABLES = ("completed_txns", "completed_txn_details", "transactions")
_COMMIT_ORDER = COLUMNS["completed_txn_details"].index("commit_order")
_REQUESTED_AT = COLUMNS["completed_txn_details"].index("requested_at")
_COPIED = tuple(t for t in Rows.TABLES if t in COLUMNS)
DEFAULT_BATCH_EPOCHS = 50_000


@dataclass(frozen=True, slots=True)
class SeedProgress:
    streams_done: int
    streams_total: int
    epochs_done: int
    epochs_total: int
    elapsed_s: float

    @property
    def epochs_per_s(self) -> float:
        return self.epochs_done / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SeedSummary:
    streams: int  # user streams written (mark streams not counted)
    skipped: int  # already present and skipped (resume)
    epochs: int  # epoch records of user streams
    rows: dict[str, int]  # rows written per table, mark streams included
    seconds: float

    @property
    def epochs_per_s(self) -> float:
        return self.epochs / self.seconds if self.seconds > 0 else 0.0


class PgHistorySeeder:
    """The reads and reservations around the COPYs, on one connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def request_buckets(self) -> int:
        return int(await self._conn.fetchval(_SQL["request_buckets"]))

    async def existing_streams(self, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for chunk in _chunks(pairs):
            rows = await self._conn.fetch(
                _SQL["existing_streams"], [p[0] for p in chunk], [p[1] for p in chunk]
            )
            found.update((r["scope"], r["name"]) for r in rows)
        return found

    async def deleted_numbers(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for chunk in _chunks(pairs):
            rows = await self._conn.fetch(
                _SQL["deleted_numbers"], [p[0] for p in chunk], [p[1] for p in chunk]
            )
            found.update(((r["scope"], r["name"]), r["last_segment_number"]) for r in rows)
        return found

    async def scope_states(self, names: Sequence[str]) -> dict[str, str]:
        rows = await self._conn.fetch(_SQL["scope_states"], list(names))
        return {r["name"]: r["state"] for r in rows}

    async def insert_scopes(self, names: Sequence[str], created_at: int) -> None:
        await self._conn.execute(_SQL["insert_scopes"], list(names), created_at)

    async def reserve_stream_ids(self, count: int) -> list[int]:
        return [r["id"] for r in await self._conn.fetch(_SQL["reserve_stream_ids"], count)]

    async def reserve_txn_numbers(self, counters: int, commit_orders: int) -> tuple[list[int], list[int]]:
        """Transaction counter values and commit-order values, in one round trip."""
        row = await self._conn.fetchrow(_SQL["reserve_txn_numbers"], counters, commit_orders)
        assert row is not None, "reserve_txn_numbers always answers one row"
        return list(row["counters"]), sorted(row["commit_orders"])

    async def analyze_tables(self) -> None:
        await self._conn.execute(_SQL["analyze_tables"])

    async def copy_rows(self, rows: Rows, written: dict[str, int]) -> None:
        """COPYs every buffered table (streams first: the others reference it; completed
        transactions before their details)."""
        if rows.txn_ids:
            details = rows.completed_txn_details
            commits = [i for i, r in enumerate(details) if r[_COMMIT_ORDER] == COMMIT_ORDER_PENDING]
            counters, orders = await self.reserve_txn_numbers(rows.txn_ids, len(commits))
            for table in _TXN_TABLES:
                buffered = rows.table(table)
                buffered[:] = [(r[0], r[1], counters[r[2]], *r[3:]) for r in buffered]
            # A commit's order is taken when it is asked for: per stream, request-time order
            # (a batch holds a stream's commits requested after those of its earlier batches).
            commits.sort(key=lambda i: (details[i][0], details[i][_REQUESTED_AT], details[i][2]))
            for i, order in zip(commits, orders, strict=True):
                row = details[i]
                details[i] = (*row[:_COMMIT_ORDER], order, *row[_COMMIT_ORDER + 1 :])
            rows.embedded_segments.extend(
                (
                    transaction_segment_name(parent, high, counters[txn]),
                    "transaction",
                    length,
                    0,
                    False,
                    0,
                    0,
                    0,
                    0,
                    created,
                    0,
                )
                for txn, high, parent, length, created in rows.txn_segments
            )
        for table in _COPIED:
            records = rows.table(table)
            if records:
                await self._conn.copy_records_to_table(table, records=records, columns=COLUMNS[table])
                written[table] = written.get(table, 0) + len(records)


async def seed_history(
    url: str,
    spec: SeedSpec,
    *,
    resume: bool = False,
    batch_epochs: int = DEFAULT_BATCH_EPOCHS,
    analyze: bool = True,
    progress: Callable[[SeedProgress], None] | None = None,
) -> SeedSummary:
    """Seeds `spec` into the database at `url` (migrated to head first if behind). Raises
    AlreadyExists when a stream to seed exists (unless `resume`, which skips those), and
    IllegalState when a scope to seed into is being deleted."""
    spec.validate()
    if batch_epochs <= 0:
        raise InvalidInput("the batch size must be positive")
    with translated():  # migrations run on their own connections, outside the wrapper
        await ensure_schema(url)
    conn = await connect(asyncpg_dsn(url))
    began = time.perf_counter()  # the rate is the seeding's own, migrations aside
    try:
        return await _seed(conn, spec, resume, batch_epochs, analyze, progress, began)
    finally:
        await conn.close()


async def _seed(
    conn: PgSession,
    spec: SeedSpec,
    resume: bool,
    batch_epochs: int,
    analyze: bool,
    progress: Callable[[SeedProgress], None] | None,
    began: float,
) -> SeedSummary:
    seeder = PgHistorySeeder(conn)
    spec = dataclasses.replace(spec, request_buckets=await seeder.request_buckets())
    scopes = scope_names(spec)
    deleting = [n for n, s in (await seeder.scope_states(scopes)).items() if s == ScopeState.DELETING.value]
    if deleting:
        raise IllegalState(f"scope {deleting[0]!r} is being deleted; seed into other scopes")
    slots = list(stream_slots(spec))
    todo = await _slots_to_write(seeder, spec, slots, resume)
    numbers = await seeder.deleted_numbers([pair for slot in todo for pair in _names(spec, slot)])
    await seeder.insert_scopes(scopes, spec.start_ms)
    ids = await seeder.reserve_stream_ids(len(todo) * (2 if spec.mark_streams else 1))

    written = dict.fromkeys(_COPIED, 0)
    total = sum(slot.epochs for slot in todo)
    streams = epochs = 0
    producer = _Producer(spec, todo, ids, numbers, batch_epochs)
    try:
        batch = await producer.next()
        while batch is not None:
            # One transaction per group of whole streams: a failure leaves none of them behind.
            async with conn.transaction():
                while True:
                    epochs += batch.rows.user_epochs
                    streams += batch.streams_done
                    await seeder.copy_rows(batch.rows, written)
                    if progress is not None:
                        progress(SeedProgress(streams, len(todo), epochs, total, time.perf_counter() - began))
                    if batch.ends_group:
                        break
                    batch = await producer.next_in_group()
            batch = await producer.next()
    finally:
        producer.stop()
    if analyze and todo:
        await seeder.analyze_tables()
    return SeedSummary(len(todo), len(slots) - len(todo), epochs, written, time.perf_counter() - began)


@dataclass
class _Batch:
    rows: Rows
    streams_done: int  # streams completed in this batch
    ends_group: bool  # the last batch of a transaction


class _Producer:
    """Generates batches in a thread while the event loop COPYs the previous one, so that
    PostgreSQL works while Python generates. The queue holds at most two batches, which bounds
    memory; `stop` makes the thread give up at its next hand-over."""

    def __init__(
        self,
        spec: SeedSpec,
        todo: list[StreamSlot],
        ids: list[int],
        numbers: dict[tuple[str, str], int],
        batch_epochs: int,
    ) -> None:
        self._spec, self._todo, self._ids, self._numbers = spec, todo, ids, numbers
        self._batch_epochs = batch_epochs
        self._queue: queue.Queue[_Batch | BaseException | None] = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seed-generator", daemon=True)
        self._thread.start()

    async def next(self) -> _Batch | None:
        item = await asyncio.to_thread(self._get)
        if isinstance(item, BaseException):
            raise item
        return item

    async def next_in_group(self) -> _Batch:
        """The next batch of a group begun; ending early is an error, which rolls the group back."""
        batch = await self.next()
        if batch is None:
            raise IllegalState("the history generator stopped in the middle of a group of streams")
        return batch

    def stop(self) -> None:
        self._stop.set()

    def _get(self) -> _Batch | BaseException | None:
        while True:
            try:
                return self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    return None
                if not self._thread.is_alive():
                    # It may have handed over its last items after the wait timed out.
                    try:
                        return self._queue.get_nowait()
                    except queue.Empty:
                        return None

    def _put(self, item: _Batch | BaseException | None) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue
        raise _Stopped

    def _run(self) -> None:
        try:
            self._generate()
            self._put(None)
        except _Stopped:
            return  # the consumer gave up; there is nobody to hand anything to
        except BaseException as exc:  # handed to the event loop, which raises it
            with contextlib.suppress(_Stopped):
                self._put(exc)

    def _generate(self) -> None:
        spec, numbers, limit = self._spec, self._numbers, self._batch_epochs
        ids = iter(self._ids)
        for group in _groups(self._todo, limit):
            rows, done = Rows(), 0
            for slot in group:
                stream_id = next(ids)
                mark_id = next(ids) if spec.mark_streams else None
                stream_ids = StreamIds(
                    stream_id,
                    mark_id,
                    numbers.get((slot.scope, slot.name), -1) + 1,
                    numbers.get((slot.scope, mark_stream_name(slot.name)), -1) + 1,
                )
                history = StreamHistory(spec, slot, stream_ids, rows)
                while not history.advance(max(1, limit - rows.user_epochs)):
                    self._put(_Batch(rows.take(), done, ends_group=False))
                    done = 0
                done += 1
            self._put(_Batch(rows.take(), done, ends_group=True))


class _Stopped(Exception):
    """The consumer gave up: the generator thread ends without handing over more."""


def _chunks(pairs: Sequence[tuple[str, str]], size: int = 50_000) -> Iterator[Sequence[tuple[str, str]]]:
    for start in range(0, len(pairs), size):
        yield pairs[start : start + size]


def _names(spec: SeedSpec, slot: StreamSlot) -> list[tuple[str, str]]:
    names = [(slot.scope, slot.name)]
    if spec.mark_streams:
        names.append((slot.scope, mark_stream_name(slot.name)))
    return names


async def _slots_to_write(
    seeder: PgHistorySeeder, spec: SeedSpec, slots: list[StreamSlot], resume: bool
) -> list[StreamSlot]:
    """The slots whose streams are absent. A present user stream is an error, or skipped when
    resuming (groups commit whole, so it is complete); a present mark stream without its user
    stream is always an error: writing the user stream would not make a consistent pair."""
    existing = await seeder.existing_streams([pair for slot in slots for pair in _names(spec, slot)])
    if not existing:
        return slots
    todo: list[StreamSlot] = []
    for slot in slots:
        names = _names(spec, slot)
        present = [pair for pair in names if pair in existing]
        if not present:
            todo.append(slot)
        elif not resume or names[0] not in existing:
            scope, name = present[0]
            hint = "" if resume else " (resume skips streams seeded before)"
            raise AlreadyExists(
                f"stream {scope}/{name} exists already; choose other prefixes or another database{hint}"
            )
    return todo


def _groups(slots: list[StreamSlot], batch_epochs: int) -> list[list[StreamSlot]]:
    """Consecutive slots, each group about `batch_epochs` epochs (one long stream is a group alone)."""
    groups: list[list[StreamSlot]] = []
    current: list[StreamSlot] = []
    epochs = 0
    for slot in slots:
        current.append(slot)
        epochs += slot.epochs
        if epochs >= batch_epochs:
            groups.append(current)
            current, epochs = [], 0
    if current:
        groups.append(current)
    return groups
