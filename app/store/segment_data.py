"""The embedded segment store's durable state in PostgreSQL (PgSegmentStorage, the SegmentStorage
of app/segmentstore/storage.py): segments, their bytes, attributes and table entries.

Invariant: every call is one database transaction (a single statement, or one transaction
block), so a call that returns has committed and a call that raises changed nothing; whatever
changes a segment locks its embedded_segments row first, so a segment only grows by whole
appends and merges, in the order they took the lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.chunks.contract import ChunkMissing, ChunkStore
from app.domain.errors import StoreUnavailable
from app.domain.segment_names import has_transient_delimiter
from app.ports import Clock
from app.segmentstore.storage import (
    NULL_ATTRIBUTE_VALUE,
    AfterAppend,
    AppendRequest,
    AppendResult,
    AttributeCheckFailed,
    AttributeUpdate,
    ConditionalCheckFailed,
    ContainerMoved,
    NoSuchSegment,
    OffsetBeyondEnd,
    ReadResult,
    SegmentKind,
    SegmentSealed,
    SegmentState,
    SegmentStorage,
    SegmentTruncated,
    WrongSegmentKind,
)
from app.store import queries
from app.store.append_fence import AppendFence
from app.store.batching import Coalescer
from app.store.chunk_blocks import ChunkBlocks
from app.store.chunk_packing import pack, read_slice
from app.store.db import Connection, Database, Row
from app.store.group_commit import GroupCommit
from app.store.segment_tables import PgTableSegments
from app.store.tier_throttle import TierThrottle
from app.store.tiered_reads import tiered_pieces

_SQL = queries.load("segment_data")

# The most appends, and bytes, one group commit carries: a group of this size commits in a few ms
# here; what arrives meanwhile makes the next group.
APPEND_GROUP_ITEMS = 512
APPEND_GROUP_BYTES = 16 * 1024 * 1024

# Pravega's AttributeUpdateType codes (a merge's conditional attribute updates).
NONE, REPLACE, REPLACE_IF_GREATER, ACCUMULATE, REPLACE_IF_EQUALS = 0, 1, 2, 3, 4


def attribute_uuid(attribute_id: int) -> uuid.UUID:
    """An attribute id (a writer id, or a client's attribute) is a u128 on the wire."""
    return uuid.UUID(int=attribute_id)


def _append_result(request: AppendRequest, row: Row | None) -> AppendResult | Exception:
    """What the `append` statement's row says of `request`: its result, or its refusal."""
    name, expected_offset = request.segment, request.expected_offset
    if row is None or row["kind"] is None:
        return NoSuchSegment(name)
    if row["kind"] == "table":
        return WrongSegmentKind(name, f"{name} is a table segment")
    if row["moved"]:
        return ContainerMoved(name, f"the container of {name} was given to another store")
    if row["sealed"]:
        return SegmentSealed(name)
    if expected_offset is not None and expected_offset != row["length"]:
        return ConditionalCheckFailed(name, f"{name} has length {row['length']}, not {expected_offset}")
    previous = row["previous"]
    previous_number = NULL_ATTRIBUTE_VALUE if previous is None else int(previous)
    new_length = row["new_length"]
    if new_length is None:
        return AppendResult(int(row["length"]), request.last_event_number, previous_number, duplicate=True)
    return AppendResult(int(new_length), request.last_event_number, previous_number, duplicate=False)


def _described(requests: Sequence[AppendRequest]) -> str:
    writers_of: dict[str, set[int]] = {}
    for r in requests:
        writers_of.setdefault(r.segment, set()).add(r.writer_id)
    writers = sum(map(len, writers_of.values()))
    most = max(map(len, writers_of.values()))
    return (
        f"{len(requests)} appends of {writers} writers on {len(writers_of)} segments "
        f"(at most {most} writers on one)"
    )


def _stream_row(name: str, row: Row | None) -> Row:
    if row is None:
        raise NoSuchSegment(name)
    if row["kind"] == "table":
        raise WrongSegmentKind(name, f"{name} is a table segment")
    return row


def _updated_value(target: str, update: AttributeUpdate, current: int) -> int:
    """The value an attribute update leaves (NULL_ATTRIBUTE_VALUE: absent), or
    AttributeCheckFailed when its condition does not hold."""
    kind = update.update_type
    if kind == NONE:
        return current
    if kind == REPLACE:
        return update.new_value
    if kind == REPLACE_IF_GREATER:
        if current != NULL_ATTRIBUTE_VALUE and update.new_value <= current:
            raise AttributeCheckFailed(target, f"attribute {update.attribute_id:x} is {current}")
        return update.new_value
    if kind == ACCUMULATE:
        return update.new_value + (0 if current == NULL_ATTRIBUTE_VALUE else current)
    if kind == REPLACE_IF_EQUALS:
        if current != update.old_value:
            raise AttributeCheckFailed(
                target, f"attribute {update.attribute_id:x} is {current}, not {update.old_value}"
            )
        return update.new_value
    raise AttributeCheckFailed(target, f"unknown attribute update type {kind}")


class PgSegmentStorage(PgTableSegments):
    """Stream, transaction and transient segments here; table segments in PgTableSegments."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        after_append: AfterAppend | None = None,
        before_group_commit: AfterAppend | None = None,
        chunks: ChunkStore | None = None,
        fence: AppendFence | None = None,
    ) -> None:
        """`after_append` runs once an append (or a group of them) committed, before any is
        answered; `before_group_commit` once a group is formed, before any of it is sent (crash
        tests' failpoints); `chunks` is the long-term tier, where the storage writer moved older
        bytes (app/store/storage_writer.py); `fence` makes each append check that the container
        map still gives its container to this store (a served store's; unfenced without)."""
        super().__init__(db, clock)
        self._fence = fence
        self._blocks = ChunkBlocks(chunks) if chunks is not None else None
        # The long-term tier's back-pressure, set by the composition when the tier is on.
        self.throttle: TierThrottle | None = None
        self._after_append = after_append
        self._before_group_commit = before_group_commit
        self._merges: Coalescer[tuple[str, tuple[str, ...]], list[int]] = Coalescer(
            self._merge_alone, self._merge_many
        )
        self._appends: GroupCommit[AppendRequest, AppendResult] = GroupCommit(
            self._append_alone,
            self._append_many,
            lambda request: len(request.data),
            lambda request: request.segment,
            max_items=APPEND_GROUP_ITEMS,
            max_bytes=APPEND_GROUP_BYTES,
        )

    async def create_segment(
        self,
        name: str,
        kind: SegmentKind,
        scale_type: int,
        target_rate: int,
        rollover_size_bytes: int,
    ) -> None:
        await self._create(name, kind, scale_type, target_rate, rollover_size_bytes, 0)

    async def segment_state(self, name: str) -> SegmentState:
        row = await self._db.fetchrow(_SQL["segment_state"], name)
        if row is None:
            raise NoSuchSegment(name)
        return SegmentState(
            name=name,
            kind=row["kind"],
            length=int(row["length"]),
            start_offset=int(row["start_offset"]),
            sealed=bool(row["sealed"]),
            last_modified_ms=int(row["last_modified"]),
            scale_type=int(row["scale_type"]),
            target_rate=int(row["target_rate"]),
        )

    async def writer_event_number(self, name: str, writer_id: int) -> int:
        """Read once every append to the segment asked of this store before it has been committed
        or dropped, and every transaction of another store still appending to the segment has
        ended (a sibling killed in the middle of its commit included): a writer that resends what
        follows the answer never stores an event twice, even when a block it resends is not one
        it sent before. Appends to other segments are not waited for: they cannot change this
        segment's writer attributes."""
        await self._appends.settled(name)
        # One round trip: a writer is set up for every Pravega transaction.
        row = await self._db.fetchrow(_SQL["writer_event_number"], name, attribute_uuid(writer_id))
        if row is None or not row["segment_found"]:
            raise NoSuchSegment(name)
        number = row["event_number"]
        return NULL_ATTRIBUTE_VALUE if number is None else int(number)

    def admission(self, segment: str) -> Awaitable[None] | None:
        return None if self.throttle is None else self.throttle.admission(segment)

    async def append(self, request: AppendRequest) -> AppendResult:
        """Committed with the other appends asked for while the previous group was being
        committed (app/store/group_commit.py), in one transaction; answered after it."""
        return await self._appends(request)

    async def _append_alone(self, request: AppendRequest) -> AppendResult:
        """One statement (sql/queries/segment_data.sql `append`): one round trip per block."""
        row = await self._db.fetchrow(_SQL["append"], *self._append_args(request))
        result = _append_result(request, row)
        if isinstance(result, Exception):
            raise result
        if self._after_append is not None:
            await self._after_append(_described([request]))
        return result

    async def _append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult | Exception]:
        """The appends in order in one transaction, their statements pipelined: one round trip
        for all, the commit included, and one WAL flush. A refused append (sealed, conditional check,
        missing segment) is a row like the others, so it changes nothing and fails nothing else."""
        args = [self._append_args(r) for r in requests]
        if self._before_group_commit is not None:
            await self._before_group_commit(_described(requests))
        # No BEGIN and COMMIT of our own, each a round trip: the pipeline's statements end in one
        # Sync, and PostgreSQL runs everything before a Sync as one implicit transaction, committed
        # at the Sync (with its one WAL flush) or rolled back whole on any error. A connection lost
        # before the Sync is a rollback too.
        rows = await self._db.fetchmany(_SQL["append"], args)
        results = [_append_result(request, row) for request, row in zip(requests, rows, strict=True)]
        if self._after_append is not None and not all(isinstance(r, Exception) for r in results):
            await self._after_append(_described(requests))
        return results

    def _append_args(self, request: AppendRequest) -> tuple[object, ...]:
        stored, lz4_length = pack(request.data)
        return (
            request.segment,
            attribute_uuid(request.writer_id),
            stored,
            request.last_event_number,
            request.expected_offset,
            self._clock.now_ms(),
            *(self._fence.arguments(request.segment) if self._fence is not None else (None, None, None)),
            lz4_length,
        )

    async def read(self, name: str, offset: int, max_length: int) -> ReadResult:
        """Bytes still in PostgreSQL come with the segment's row, in one snapshot; bytes in the
        long-term tier from the chunk store, by range. An object missing there was collected
        after a truncation or deletion that committed since the snapshot: the read runs again,
        and then answers what that change says (truncated, no such segment)."""
        for attempt in range(2):
            rows = await self._db.fetch(_SQL["read"], name, offset, max(0, max_length))
            row = _stream_row(name, rows[0] if rows else None)
            length, start, sealed = int(row["length"]), int(row["start_offset"]), bool(row["sealed"])
            if offset < start:
                raise SegmentTruncated(name, start, f"{name} starts at {start}, not {offset}")
            if sealed and offset > length:
                raise OffsetBeyondEnd(name, f"{name} ends at {length}, before {offset}")
            if all(r["object"] is None for r in rows):
                slices = (read_slice(name, r, offset, max(0, max_length)) for r in rows)
                return ReadResult(offset, tuple(piece for piece in slices if piece), length, start, sealed)
            try:
                pieces = await tiered_pieces(self._blocks, name, rows, offset, max(0, max_length))
            except ChunkMissing as exc:
                if attempt:
                    # Still named by the index: not a release racing the read but a lost object.
                    raise StoreUnavailable(f"{name}: a chunk of its long-term tier is missing") from exc
                continue
            return ReadResult(offset, pieces, length, start, sealed)
        raise AssertionError("unreachable")

    async def seal(self, name: str) -> int:
        row = _stream_row(name, await self._db.fetchrow(_SQL["seal"], name, self._clock.now_ms()))
        if row["sealed"]:
            raise SegmentSealed(name)
        return int(row["length"])

    async def truncate(self, name: str, offset: int) -> None:
        row = _stream_row(name, await self._db.fetchrow(_SQL["truncate"], name, offset, self._clock.now_ms()))
        start, length = int(row["start_offset"]), int(row["length"])
        if not start <= offset <= length:
            raise SegmentTruncated(name, start, f"cannot truncate {name} at {offset}: [{start}, {length}]")

    async def delete(self, name: str) -> None:
        async with self._db.transaction() as conn:
            if await conn.fetchrow(_SQL["lock_segment"], name) is None:
                raise NoSuchSegment(name)
            await conn.execute(_SQL["delete_segment"], name)

    async def transients_created_before(
        self, after: str, created_before_ms: int, limit: int
    ) -> list[tuple[str, int]]:
        """A page of (name, created_at) of transient segments created before `created_before_ms`,
        in name order after `after` (the orphan sweep's candidates)."""
        rows = await self._db.fetch(_SQL["list_transients"], after, created_before_ms, limit)
        return [(str(r["name"]), int(r["created_at"])) for r in rows]

    async def delete_transients(
        self, names: Sequence[str], created_before_ms: int, unchanged_since_ms: int
    ) -> list[str]:
        """Deletes, in one statement, those of `names` that are transient segments created before
        `created_before_ms` and not changed since `unchanged_since_ms`; returns the ones deleted."""
        rows = await self._db.fetch(
            _SQL["delete_transients"], list(names), created_before_ms, unchanged_since_ms
        )
        return [str(r["name"]) for r in rows]

    async def update_policy(self, name: str, scale_type: int, target_rate: int) -> None:
        kind = await self._db.fetchval(
            _SQL["update_policy"], name, scale_type, target_rate, self._clock.now_ms()
        )
        if kind is None:
            raise NoSuchSegment(name)

    async def get_attribute(self, name: str, attribute_id: int) -> int:
        row = await self._db.fetchrow(_SQL["get_attribute"], name, attribute_uuid(attribute_id))
        if row is None:
            raise NoSuchSegment(name)
        value = row["value"]
        return NULL_ATTRIBUTE_VALUE if value is None else int(value)

    async def update_attribute(
        self, name: str, attribute_id: int, new_value: int, expected_value: int
    ) -> bool:
        """Setting NULL_ATTRIBUTE_VALUE removes the attribute (absent and NULL are one state)."""
        async with self._db.transaction() as conn:
            if await conn.fetchrow(_SQL["lock_segment"], name) is None:
                raise NoSuchSegment(name)
            current = await self._attributes(conn, name, [attribute_id])
            if current.get(attribute_id, NULL_ATTRIBUTE_VALUE) != expected_value:
                return False
            await self._put_attributes(conn, name, {attribute_id: new_value})
            return True

    async def _attributes(self, conn: Connection, name: str, ids: Sequence[int]) -> dict[int, int]:
        rows = await conn.fetch(_SQL["get_attributes"], name, [attribute_uuid(i) for i in ids])
        return {r["attribute_id"].int: int(r["value"]) for r in rows}

    async def _put_attributes(self, conn: Connection, name: str, values: dict[int, int]) -> None:
        await conn.execute(
            _SQL["put_attributes"],
            name,
            [attribute_uuid(i) for i in values],
            list(values.values()),
            NULL_ATTRIBUTE_VALUE,
        )

    async def merge(
        self, target: str, sources: Sequence[str], attribute_updates: Sequence[AttributeUpdate]
    ) -> list[int]:
        """When no source exists any more (all merged already) the target's length is the answer
        for each, even on a sealed target, and the attribute updates are not looked at: they
        belonged to the merge that happened. Otherwise the updates apply only with the merge.
        Merges without attribute updates asked for at once (a commit merges into every segment of
        the stream together) share one database transaction."""
        if attribute_updates:
            return await self._merge_one(target, sources, attribute_updates)
        return await self._merges((target, tuple(sources)))

    async def _merge_alone(self, merge: tuple[str, tuple[str, ...]]) -> list[int]:
        return await self._merge_one(merge[0], merge[1], ())

    async def _merge_one(
        self, target: str, sources: Sequence[str], attribute_updates: Sequence[AttributeUpdate]
    ) -> list[int]:
        async with self._db.transaction() as conn:
            # Four round trips (begin, lock, apply, commit).
            wanted = [s for s in dict.fromkeys(sources) if s != target]
            locked = await conn.fetch(_SQL["lock_merge"], target, wanted)
            row = _stream_row(target, locked[0] if locked and locked[0]["name"] == target else None)
            present = {str(r["name"]): r for r in locked[1:]}
            plan = _plan_merge(target, sources, row, present)
            if not plan.moved:
                return plan.lengths
            if attribute_updates:
                current = await self._attributes(conn, target, [u.attribute_id for u in attribute_updates])
                values: dict[int, int] = {}
                for update in attribute_updates:
                    key = update.attribute_id
                    before = values.get(key, current.get(key, NULL_ATTRIBUTE_VALUE))
                    values[key] = _updated_value(target, update, before)
            await conn.execute(
                _SQL["merge_apply"], target, plan.moved, plan.bases, plan.length, self._clock.now_ms()
            )
            if attribute_updates:
                await self._put_attributes(conn, target, values)
        return plan.lengths

    async def _merge_many(self, batch: Sequence[tuple[str, tuple[str, ...]]]) -> list[list[int] | Exception]:
        """Merges into distinct targets from distinct sources in one transaction of four round
        trips. Raises (changing nothing) when any of them is refused or they overlap: each then
        runs alone, with its own outcome."""
        targets = [target for target, _ in batch]
        wanted = [[s for s in dict.fromkeys(sources) if s != target] for target, sources in batch]
        every_source = [s for w in wanted for s in w]
        if len(set(targets)) < len(targets) or len(set(every_source)) < len(every_source):
            raise _Overlap()
        if not set(every_source).isdisjoint(targets):
            raise _Overlap()
        async with self._db.transaction() as conn:
            locked = {str(r["name"]): r for r in await conn.fetch(_SQL["lock_merges"], targets, every_source)}
            plans = [
                _plan_merge(
                    target,
                    sources,
                    _stream_row(target, locked.get(target)),
                    {s: locked[s] for s in names if s in locked},
                )
                for (target, sources), names in zip(batch, wanted, strict=True)
            ]
            applied = [(target, plan) for target, plan in zip(targets, plans, strict=True) if plan.moved]
            if applied:
                await conn.execute(
                    _SQL["merges_apply"],
                    [target for target, plan in applied for _ in plan.moved],
                    [source for _, plan in applied for source in plan.moved],
                    [base for _, plan in applied for base in plan.bases],
                    [target for target, _ in applied],
                    [plan.length for _, plan in applied],
                    self._clock.now_ms(),
                )
        return [plan.lengths for plan in plans]


class _Overlap(Exception):
    """Merges asked for together that touch a segment twice: they run one by one instead."""


@dataclass(frozen=True, slots=True)
class _MergePlan:
    lengths: list[int]  # the target's length after each source, as the reply reports them
    moved: list[str]  # the sources still there, in merge order
    bases: list[int]  # each moved source's offset in the target
    length: int  # the target's length after the merge


def _plan_merge(target: str, sources: Sequence[str], row: Row, present: dict[str, Row]) -> _MergePlan:
    """What merging the locked `present` sources into the locked target `row` does, or the
    refusal: a sealed target (unless nothing is left to merge), a table or truncated source."""
    length = int(row["length"])
    for name in sources:
        # A transient segment is merged once, by the connection that created it: when it is gone
        # it was deleted (its connection closed, or an orphan sweep found it), never merged, and
        # answering "merged" would acknowledge a large event that was lost.
        if name not in present and name != target and has_transient_delimiter(name):
            raise NoSuchSegment(name)
    if not present:
        return _MergePlan([length] * len(sources), [], [], length)
    if row["sealed"]:
        raise SegmentSealed(target)
    for name, source in present.items():
        if source["kind"] == "table":
            raise WrongSegmentKind(name, f"{name} is a table segment")
        if source["start_offset"] > 0:
            raise SegmentTruncated(name, int(source["start_offset"]), f"{name} is truncated")
    left = dict(present)
    lengths: list[int] = []
    moved: list[str] = []
    bases: list[int] = []
    for name in sources:
        if name in left:
            source = left.pop(name)
            moved.append(name)
            bases.append(length)
            length += int(source["length"])
        lengths.append(length)
    return _MergePlan(lengths, moved, bases, length)


if TYPE_CHECKING:
    # mypy's proof that this is the wire server's SegmentStorage (a signature drifting apart
    # fails the type check, not a run).
    _IMPLEMENTS: type[SegmentStorage] = PgSegmentStorage
