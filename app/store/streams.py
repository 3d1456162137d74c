"""Stream metadata in PostgreSQL (StreamStore port): one row per record, each versioned.

Creation writes the stream, all its per-stream records and epoch 0 in one transaction, so a
stream is either wholly absent or present in CREATING with everything it needs to finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import epoch_of, number_of
from app.domain.limits import SEGMENTS_PER_BATCH
from app.domain.names import MARK_PREFIX, READER_GROUP_STREAM_PREFIX
from app.domain.records import (
    EpochRecord,
    EpochTransitionRecord,
    ScopeState,
    SegmentRecord,
    StreamConfig,
    StreamState,
    TruncationRecord,
    Versioned,
)
from app.domain.requests import NewRequest, RequestKind
from app.domain.scaling import initial_segments
from app.ports import StreamCreation
from app.store import queries
from app.store.cache import RecordCache, StreamView
from app.store.db import Connection, Database, Queries
from app.store.errors import conflict_or_missing
from app.store.requests import insert_request
from app.store.rows import (
    config_columns,
    config_from_row,
    cut_from_json,
    cut_to_json,
    epoch_columns,
    epoch_from_row,
    truncation_columns,
    truncation_from_row,
)

_SQL = queries.load("streams")
EMPTY_EPOCH_TRANSITION = -1
# Internal streams whose creation another workflow finishes: a mark stream is finished with its
# stream, a reader group's state stream by the group's own request.
FINISHED_BY_THEIR_OWNER = (MARK_PREFIX, READER_GROUP_STREAM_PREFIX)
# A name created and deleted again between our read and our insert, this many times in a row.
_CREATE_ATTEMPTS = 5
# A stream deleted (and maybe created again) between our reads of it, this many times in a row.
_REREADS = 3


async def _initial_segments(count: int, first_number: int, creation_time: int) -> tuple[SegmentRecord, ...]:
    """Epoch 0's segments built a batch at a time, yielding to the event loop between batches:
    10,000 of them are tens of milliseconds of Python, more on a busy machine."""
    segments: list[SegmentRecord] = []
    for start in range(0, count, SEGMENTS_PER_BATCH):
        segments.extend(
            initial_segments(count, first_number, creation_time, start, start + SEGMENTS_PER_BATCH)
        )
        if start + SEGMENTS_PER_BATCH < count:
            await asyncio.sleep(0)
    return tuple(segments)


async def _epoch_record(row: Any) -> EpochRecord:
    """epoch_from_row, except that a large epoch's segments are built a batch at a time with the
    event loop served in between (10,000 of them are tens of milliseconds of Python)."""
    ids = row["segment_ids"]
    if len(ids) <= SEGMENTS_PER_BATCH:
        return epoch_from_row(row)
    columns = list(zip(ids, row["key_starts"], row["key_ends"], row["segment_creation_times"], strict=True))
    segments: list[SegmentRecord] = []
    for first in range(0, len(columns), SEGMENTS_PER_BATCH):
        if first:
            await asyncio.sleep(0)
        segments.extend(
            SegmentRecord(number_of(sid), epoch_of(sid), ct, ks, ke)
            for sid, ks, ke, ct in columns[first : first + SEGMENTS_PER_BATCH]
        )
    return EpochRecord(
        epoch=row["epoch"],
        reference_epoch=row["reference_epoch"],
        segments=tuple(segments),
        creation_time=row["creation_time"],
        splits=row["splits"],
        merges=row["merges"],
    )


class PgStreamStore:
    def __init__(self, db: Database, cache: RecordCache | None = None) -> None:
        self._db = db
        # Without a listener the cache is never trusted: only immutable records are reused.
        self._cache = cache if cache is not None else RecordCache()

    # --- creation -------------------------------------------------------------------------

    async def create_stream_metadata(
        self,
        scope: str,
        name: str,
        config: StreamConfig,
        creation_time: int,
    ) -> StreamCreation:
        """Writes the stream in CREATING, or answers what exists (also when a concurrent create
        won the name while we were at it)."""
        for _ in range(_CREATE_ATTEMPTS):
            async with self._db.transaction() as conn:
                scope_state = await conn.fetchval(_SQL["scope_state_for_share"], scope)
                if scope_state is None or scope_state == ScopeState.DELETING.value:
                    raise NotFound(f"scope {scope!r} not found")
                existing = await self._existing(conn, scope, name)
                if existing is not None:
                    return existing
                last = await conn.fetchval(_SQL["last_deleted_segment_number"], scope, name)
                first_number = 0 if last is None else last + 1
                stream_id = await conn.fetchval(_SQL["insert_stream"], scope, name, creation_time)
                if stream_id is None:
                    # A concurrent create won the name and committed while we waited on it: it is
                    # an existing stream now, read by the next statement's fresh snapshot.
                    existing = await self._existing(conn, scope, name)
                    if existing is not None:
                        return existing
                    continue  # it was deleted again meanwhile: try afresh
                epoch_zero = EpochRecord(
                    epoch=0,
                    reference_epoch=0,
                    segments=await _initial_segments(
                        config.scaling.min_num_segments, first_number, creation_time
                    ),
                    creation_time=creation_time,
                )
                await conn.execute(
                    _SQL["insert_stream_records"],
                    stream_id,
                    *config_columns(config),
                    creation_time,
                    *epoch_columns(epoch_zero),
                )
                return StreamCreation(True, StreamState.CREATING, creation_time, config, epoch_zero)
        raise WriteConflict(f"stream {scope}/{name} kept being created and deleted concurrently")

    async def file_creation_finishers(self, started_before: int, buckets: Sequence[int], now_ms: int) -> int:
        """Files a create request for each stream of `buckets` still CREATING although its
        creation started before `started_before` (its call was cut off) and not yet holding one,
        except the internal streams other workflows finish; answers how many were filed."""
        return int(
            await self._db.fetchval(
                _SQL["file_creation_finishers"],
                started_before,
                list(buckets),
                RequestKind.CREATE_STREAM.value,
                now_ms,
                list(FINISHED_BY_THEIR_OWNER),
            )
        )

    async def get_creation(self, scope: str, name: str) -> StreamCreation:
        """What creating the stream wrote (created=False), to finish it. Raises NotFound."""
        async with self._db.acquire() as conn:
            existing = await self._existing(conn, scope, name)
        if existing is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return existing

    async def _existing(self, conn: Connection, scope: str, name: str) -> StreamCreation | None:
        for _ in range(_REREADS):
            row = await conn.fetchrow(_SQL["find_stream"], scope, name)
            if row is None:
                return None
            config_row = await conn.fetchrow(_SQL["get_config"], scope, name)
            epoch_row = await conn.fetchrow(_SQL["get_epoch"], scope, name, 0)
            # Both are written in the same transaction as the stream row; each statement sees the
            # latest commits, so one is missing only when a deletion committed between the reads:
            # read again (the stream is then gone, or a new one took the name).
            if config_row is not None and epoch_row is not None:
                return StreamCreation(
                    False,
                    StreamState(row["state"]),
                    row["creation_time"],
                    config_from_row(config_row),
                    await _epoch_record(epoch_row),
                )
        raise WriteConflict(f"stream {scope}/{name} kept being deleted and created concurrently")

    async def activate_created_stream(
        self, scope: str, name: str, expected_state_version: int, *, index_tags: bool
    ) -> None:
        async with self._db.transaction() as conn:
            version = await conn.fetchval(
                _SQL["set_state"], scope, name, StreamState.ACTIVE.value, expected_state_version
            )
            if version is None:
                found = await conn.fetchrow(_SQL["find_stream"], scope, name)
                raise conflict_or_missing(found is not None, f"stream {scope}/{name}")
            if index_tags:
                found = await conn.fetchrow(_SQL["find_stream"], scope, name)
                assert found is not None, "the stream row was just updated in this transaction"
                await conn.execute(_SQL["index_tags"], found["id"])
        self._cache.invalidate_name(scope, name)

    # --- reads ----------------------------------------------------------------------------

    async def stream_exists(self, scope: str, name: str) -> bool:
        return bool(await self._db.fetchval(_SQL["stream_exists"], scope, name))

    async def get_config(self, scope: str, name: str) -> Versioned[StreamConfig]:
        row = await self._db.fetchrow(_SQL["get_config"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return Versioned(config_from_row(row), row["version"])

    async def get_configs(self, scope: str, names: Sequence[str]) -> dict[str, StreamConfig]:
        rows = await self._db.fetch(_SQL["get_configs"], scope, list(names))
        return {row["name"]: config_from_row(row) for row in rows}

    async def get_config_record(self, scope: str, name: str) -> Versioned[tuple[StreamConfig, bool]]:
        """The configuration with its `updating` flag (set while an update is in flight)."""
        row = await self._db.fetchrow(_SQL["get_config"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return Versioned((config_from_row(row), row["updating"]), row["version"])

    async def get_state(self, scope: str, name: str) -> Versioned[StreamState]:
        row = await self._db.fetchrow(_SQL["get_state"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return Versioned(StreamState(row["state"]), row["version"])

    async def list_streams(self, scope: str, after: str, limit: int) -> list[str]:
        row = await self._db.fetchrow(_SQL["list_streams"], scope, after, limit)
        assert row is not None, "a listing always answers one row"
        if not row["scope_exists"]:
            raise NotFound(f"scope {scope!r} not found")
        return list(row["names"])

    async def list_streams_for_tag(self, scope: str, tag: str, after: str, limit: int) -> list[str]:
        row = await self._db.fetchrow(_SQL["list_streams_for_tag"], scope, tag, after, limit)
        assert row is not None, "a listing always answers one row"
        if not row["scope_exists"]:
            raise NotFound(f"scope {scope!r} not found")
        return list(row["names"])

    async def get_active_epoch(self, scope: str, name: str) -> tuple[StreamState, EpochRecord]:
        view = self._cache.view(scope, name)
        if view is not None:
            record = self._cache.epoch(view.stream_id, view.epoch)
            if record is not None:
                return view.state, record
        generation = self._cache.generation
        row = await self._db.fetchrow(_SQL["get_active_epoch"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        record = await _epoch_record(row)
        state = StreamState(row["state"])
        self._cache.remember_epoch(row["stream_id"], record)
        self._cache.remember_view(scope, name, StreamView(row["stream_id"], state, record.epoch), generation)
        return state, record

    async def get_epoch(self, scope: str, name: str, epoch: int, stream_id: int | None = None) -> EpochRecord:
        if stream_id is None:
            view = self._cache.view(scope, name)
            stream_id = None if view is None else view.stream_id
        if stream_id is not None:
            cached = self._cache.epoch(stream_id, epoch)
            if cached is not None:
                return cached
        row = await self._db.fetchrow(_SQL["get_epoch"], scope, name, epoch)
        if row is None:
            raise NotFound(f"epoch {epoch} of stream {scope}/{name} not found")
        record = await _epoch_record(row)
        self._cache.remember_epoch(row["stream_id"], record)
        return record

    async def get_epochs(self, scope: str, name: str, low: int, high: int) -> list[EpochRecord]:
        """Epochs low..high in order (fewer if the history is shorter); one round trip."""
        view = self._cache.view(scope, name)
        if view is not None and high - low < 64:
            cached = [self._cache.epoch(view.stream_id, e) for e in range(low, high + 1)]
            if all(record is not None for record in cached):
                return [record for record in cached if record is not None]
        rows = await self._db.fetch(_SQL["get_epoch_range"], scope, name, low, high)
        if not rows:
            raise NotFound(f"stream {scope}/{name} not found")
        records = [epoch_from_row(row) for row in rows if row["epoch"] is not None]
        for record in records:
            self._cache.remember_epoch(rows[0]["stream_id"], record)
        return records

    async def get_epochs_by_time(
        self, scope: str, name: str, from_ms: int, to_ms: int, limit: int
    ) -> list[EpochRecord]:
        """The epoch in force at `from_ms` and those created in [from_ms, to_ms], by epoch."""
        rows = await self._db.fetch(_SQL["get_epochs_by_time"], scope, name, from_ms, to_ms, limit)
        if not rows:
            raise NotFound(f"stream {scope}/{name} not found")
        return [epoch_from_row(row) for row in rows if row["epoch"] is not None]

    async def get_successor_epochs(
        self, scope: str, name: str, segment: int
    ) -> tuple[EpochRecord, EpochRecord] | None:
        """(epoch the segment was sealed in, the epoch before it), or None while it is unsealed
        or unknown. Raises NotFound for a missing stream. At most one round trip."""
        view = self._cache.view(scope, name)
        if view is not None:
            sealed_in = self._cache.sealed_in(view.stream_id, segment)
            if sealed_in is not None:
                sealed_record = self._cache.epoch(view.stream_id, sealed_in)
                previous = self._cache.epoch(view.stream_id, sealed_in - 1)
                if sealed_record is not None and previous is not None:
                    return sealed_record, previous
        rows = await self._db.fetch(_SQL["get_successors"], scope, name, segment)
        if not rows:
            raise NotFound(f"stream {scope}/{name} not found")
        sealed_epoch = rows[0]["sealed_epoch"]
        records = {row["epoch"]: epoch_from_row(row) for row in rows if row["epoch"] is not None}
        if sealed_epoch is None or sealed_epoch not in records or sealed_epoch - 1 not in records:
            return None
        stream_id = rows[0]["stream_id"]
        for record in records.values():
            self._cache.remember_epoch(stream_id, record)
        self._cache.remember_sealed_in(stream_id, segment, sealed_epoch)
        return records[sealed_epoch], records[sealed_epoch - 1]

    async def get_head(self, scope: str, name: str) -> dict[int, int]:
        row = await self._db.fetchrow(_SQL["get_head"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        cut = cut_from_json(row["stream_cut"])
        if cut:
            return cut
        return {segment: 0 for segment in row["segment_ids"]}

    async def get_segment(
        self, scope: str, name: str, segment: int
    ) -> Versioned[tuple[SegmentRecord, int | None]]:
        """A segment with the epoch it was sealed in (None while it is active)."""
        row = await self._db.fetchrow(_SQL["get_segment"], scope, name, segment)
        if row is None:
            raise NotFound(f"segment {segment} of stream {scope}/{name} not found")
        record = SegmentRecord(
            row["number"], row["creation_epoch"], row["creation_time"], row["key_start"], row["key_end"]
        )
        return Versioned((record, row["sealed_epoch"]), row["version"])

    # --- conditional writes: each raises WriteConflict when the version moved on ----------

    async def _conditional(
        self,
        query: str,
        what: str,
        scope: str,
        name: str,
        *args: Any,
        record_exists: tuple[str, tuple[Any, ...]] = (_SQL["stream_exists"], ()),
        request: NewRequest | None = None,
    ) -> int:
        """Runs a version-checked write; on no row, tells a missing record from a lost race.
        `record_exists` is the read (SQL, extra args) proving the record itself, not just the
        stream, exists. A `request` is enqueued in the same transaction (the outbox): the
        write and its request commit together or not at all."""
        sql = _SQL[query]
        if request is None:
            return await self._write_checked(self._db, sql, what, scope, name, args, record_exists)
        async with self._db.transaction() as conn:
            version = await self._write_checked(conn, sql, what, scope, name, args, record_exists)
            await insert_request(conn, request)
            return version

    @staticmethod
    async def _write_checked(
        runner: Queries,
        sql: str,
        what: str,
        scope: str,
        name: str,
        args: tuple[Any, ...],
        record_exists: tuple[str, tuple[Any, ...]],
    ) -> int:
        version = await runner.fetchval(sql, scope, name, *args)
        if version is None:
            exists_sql, exists_args = record_exists
            found = await runner.fetchval(exists_sql, scope, name, *exists_args)
            raise conflict_or_missing(
                found is not None and found is not False, f"{what} of stream {scope}/{name}"
            )
        return int(version)

    async def set_state(
        self,
        scope: str,
        name: str,
        state: StreamState,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        try:
            return await self._conditional(
                "set_state", "state", scope, name, state.value, expected_version, request=request
            )
        finally:
            self._cache.invalidate_name(scope, name)

    async def set_config(
        self,
        scope: str,
        name: str,
        config: StreamConfig,
        updating: bool,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        return await self._conditional(
            "set_config",
            "configuration",
            scope,
            name,
            *config_columns(config),
            updating,
            expected_version,
            request=request,
        )

    async def get_current_epoch_pointer(self, scope: str, name: str) -> Versioned[int]:
        row = await self._db.fetchrow(_SQL["get_current_epoch_pointer"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return Versioned(row["epoch"], row["version"])

    async def set_current_epoch_pointer(
        self, scope: str, name: str, epoch: int, expected_version: int
    ) -> int:
        try:
            return await self._conditional(
                "set_current_epoch_pointer", "current epoch", scope, name, epoch, expected_version
            )
        finally:
            self._cache.invalidate_name(scope, name)

    async def get_truncation(self, scope: str, name: str) -> Versioned[TruncationRecord]:
        row = await self._db.fetchrow(_SQL["get_truncation"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return Versioned(truncation_from_row(row), row["version"])

    async def set_truncation(
        self,
        scope: str,
        name: str,
        record: TruncationRecord,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        return await self._conditional(
            "set_truncation",
            "truncation record",
            scope,
            name,
            *truncation_columns(record),
            expected_version,
            request=request,
        )

    async def complete_truncation(
        self,
        scope: str,
        name: str,
        completed: TruncationRecord,
        deleted_now: frozenset[int],
        completed_at: int,
        expected_version: int,
    ) -> int:
        """Writes the completed record and, with it, the truncation's history row: when it
        completed and the segments it deleted (`deleted_now`)."""
        if completed.updating:
            raise ValueError("a completed truncation record is not updating")
        return await self._conditional(
            "complete_truncation",
            "truncation record",
            scope,
            name,
            *truncation_columns(completed),
            expected_version,
            completed_at,
            sorted(deleted_now),
        )

    async def get_epoch_transition(self, scope: str, name: str) -> Versioned[EpochTransitionRecord | None]:
        row = await self._db.fetchrow(_SQL["get_epoch_transition"], scope, name)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        if row["active_epoch"] == EMPTY_EPOCH_TRANSITION:
            return Versioned(None, row["version"])
        record = EpochTransitionRecord(
            active_epoch=row["active_epoch"],
            time=row["time"],
            segments_to_seal=frozenset(row["segments_to_seal"]),
            new_segments=tuple(
                zip(row["new_segment_ids"], row["new_key_starts"], row["new_key_ends"], strict=True)
            ),
        )
        return Versioned(record, row["version"])

    async def set_epoch_transition(
        self,
        scope: str,
        name: str,
        record: EpochTransitionRecord | None,
        expected_version: int,
        *,
        request: NewRequest | None = None,
    ) -> int:
        if record is None:
            columns: tuple[Any, ...] = (EMPTY_EPOCH_TRANSITION, 0, [], [], [], [])
        else:
            columns = (
                record.active_epoch,
                record.time,
                sorted(record.segments_to_seal),
                [s[0] for s in record.new_segments],
                [s[1] for s in record.new_segments],
                [s[2] for s in record.new_segments],
            )
        return await self._conditional(
            "set_epoch_transition",
            "epoch transition",
            scope,
            name,
            *columns,
            expected_version,
            request=request,
        )

    async def set_segment_sealed_epoch(
        self, scope: str, name: str, segment: int, sealed_epoch: int, expected_version: int
    ) -> int:
        return await self._conditional(
            "set_segment_sealed_epoch",
            f"segment {segment}",
            scope,
            name,
            segment,
            sealed_epoch,
            expected_version,
            record_exists=(_SQL["get_segment"], (segment,)),
        )

    async def get_sealed_size_shard(
        self, scope: str, name: str, shard: int
    ) -> Versioned[dict[int, int]] | None:
        row = await self._db.fetchrow(_SQL["get_sealed_size_shard"], scope, name, shard)
        if row is None:
            return None
        return Versioned(cut_from_json(row["sizes"]), row["version"])

    async def put_sealed_size_shard(
        self, scope: str, name: str, shard: int, sizes: dict[int, int], expected_version: int | None
    ) -> int:
        """Creates the shard when `expected_version` is None, else replaces it at that version."""
        if expected_version is None:
            version = await self._db.fetchval(
                _SQL["insert_sealed_size_shard"], scope, name, shard, cut_to_json(sizes)
            )
            if version is None:
                exists = await self._db.fetchval(_SQL["stream_exists"], scope, name)
                raise conflict_or_missing(bool(exists), f"sealed-size shard {shard} of {scope}/{name}")
            return int(version)
        return await self._conditional(
            "set_sealed_size_shard",
            f"sealed-size shard {shard}",
            scope,
            name,
            shard,
            cut_to_json(sizes),
            expected_version,
            record_exists=(_SQL["get_sealed_size_shard"], (shard,)),
        )

    async def get_deleted_stream(self, scope: str, name: str) -> Versioned[int] | None:
        row = await self._db.fetchrow(_SQL["get_deleted_stream"], scope, name)
        return None if row is None else Versioned(row["last_segment_number"], row["version"])

    async def put_deleted_stream(
        self, scope: str, name: str, last_segment_number: int, expected_version: int | None
    ) -> int:
        if expected_version is None:
            version = await self._db.fetchval(_SQL["insert_deleted_stream"], scope, name, last_segment_number)
        else:
            version = await self._db.fetchval(
                _SQL["set_deleted_stream"], scope, name, last_segment_number, expected_version
            )
        if version is None:
            raise WriteConflict(f"deleted-stream record of {scope}/{name} was changed concurrently")
        return int(version)

    async def reindex_tags(self, scope: str, name: str) -> None:
        await self._db.execute(_SQL["reindex_tags"], scope, name)

    # --- scale, deletion ------------------------------------------------------------------------

    async def add_epoch(
        self,
        scope: str,
        name: str,
        record: EpochRecord,
        sealed: Sequence[int],
        created: Sequence[SegmentRecord],
        *,
        duplicate: bool = False,
    ) -> None:
        """Writes a new epoch with its new segments and marks the sealed ones sealed in it.
        Idempotent: re-running it after a crash leaves the same rows."""
        ids, starts, ends, times = epoch_columns(record)
        found = await self._db.fetchval(
            _SQL["insert_epoch"],
            scope,
            name,
            record.epoch,
            record.reference_epoch,
            record.creation_time,
            record.splits,
            record.merges,
            ids,
            starts,
            ends,
            times,
            sorted(sealed),
            [s.id for s in created],
            [s.key_start for s in created],
            [s.key_end for s in created],
            duplicate,
        )
        if not found:
            raise NotFound(f"stream {scope}/{name} not found")

    async def all_segment_ids(self, scope: str, name: str) -> list[int]:
        rows = await self._db.fetch(_SQL["all_segment_ids"], scope, name)
        return [row["segment_id"] for row in rows]

    async def get_creation_time(self, scope: str, name: str) -> int:
        value = await self._db.fetchval(_SQL["get_creation_time"], scope, name)
        if value is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return int(value)

    async def delete_stream(self, scope: str, name: str, creation_time: int = 0) -> bool:
        """Removes the stream's metadata (when `creation_time` is non-zero, only that
        incarnation of the name) and records its highest segment number; False if absent."""
        try:
            gone = await self._db.fetchval(_SQL["delete_stream"], scope, name, creation_time)
        finally:
            self._cache.invalidate_name(scope, name)
        return bool(gone)
