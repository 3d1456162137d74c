"""Writer marks and emitted watermarks in PostgreSQL (WatermarkStore port).

A mark is one versioned row per (stream, writer); every change of it is conditional on the
version read, and the watermark round's changes are fenced by the bucket's generation too.
Watermarks are insert-only rows numbered per stream; an append names the number it follows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app.domain.errors import NotFound
from app.domain.records import Versioned
from app.domain.txns import TxnId
from app.domain.watermarks import SegmentRange, TrackedMark, Watermark, WriterMark
from app.ports import MarkChange, StoredWatermark, WatermarkAppend, WatermarkMember
from app.store import queries
from app.store.db import Database, Row
from app.store.errors import conflict_or_missing
from app.store.rows import cut_from_json, cut_to_json

_SQL = queries.load("watermarks")


def stream_cut_to_json(cut: Mapping[SegmentRange, int]) -> list[list[float | int]]:
    return [
        [s.segment, offset, s.low, s.high] for s, offset in sorted(cut.items(), key=lambda e: e[0].segment)
    ]


def stream_cut_from_json(doc: Sequence[Sequence[Any]]) -> dict[SegmentRange, int]:
    return {SegmentRange(int(seg), float(low), float(high)): int(offset) for seg, offset, low, high in doc}


def _stored(row: Row) -> StoredWatermark | None:
    if row["seq"] is None:
        return None
    return StoredWatermark(
        seq=row["seq"],
        watermark=Watermark(
            row["lower_time_bound"], row["upper_time_bound"], stream_cut_from_json(row["stream_cut"])
        ),
        created_at=row["created_at"],
        mark_offset=row["mark_offset"],
    )


def _member(row: Row) -> WatermarkMember:
    marks = tuple(
        TrackedMark(writer, WriterMark(time, cut_from_json(position), alive), since, version)
        for writer, time, position, alive, since, version in zip(
            row["writers"],
            row["times"],
            row["positions"],
            row["alive"],
            row["inactive_since"],
            row["versions"],
            strict=True,
        )
    )
    return WatermarkMember(
        stream_id=row["stream_id"],
        scope=row["scope"],
        stream=row["name"],
        bucket=row["bucket"],
        timeout_ms=row["timestamp_aggregation_timeout"],
        marks=marks,
        latest=_stored(row),
        mark_segment=row["mark_segment"],
    )


def _mark_columns(mark: WriterMark) -> tuple[int, dict[str, int], bool]:
    """A writer's mark as create_writer_mark and update_writer_mark take it: time, position, alive."""
    return mark.timestamp, cut_to_json(mark.position), mark.alive


def _fence_columns(changes: Sequence[MarkChange]) -> list[list[Any]]:
    return [
        [c.stream_id for c in changes],
        [c.writer for c in changes],
        [c.expected_version for c in changes],
        [c.fence.service.value for c in changes],
        [c.fence.bucket for c in changes],
        [c.fence.generation for c in changes],
    ]


class PgWatermarkStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- one writer's mark ----------------------------------------------------------------

    async def get_writer_mark(self, scope: str, name: str, writer: str) -> Versioned[WriterMark] | None:
        row = await self._db.fetchrow(_SQL["get_writer_mark"], scope, name, writer)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        if row["version"] is None:
            return None
        mark = WriterMark(row["mark_time"], cut_from_json(row["position"]), row["alive"])
        return Versioned(mark, row["version"])

    async def create_writer_mark(self, scope: str, name: str, writer: str, mark: WriterMark) -> int:
        version = await self._db.fetchval(
            _SQL["create_writer_mark"], scope, name, writer, *_mark_columns(mark)
        )
        if version is None:
            # The stream is gone (NotFound), or the mark was created concurrently (a conflict).
            await self.get_writer_mark(scope, name, writer)
            raise conflict_or_missing(True, f"mark of writer {writer!r} on {scope}/{name}")
        return int(version)

    async def update_writer_mark(
        self, scope: str, name: str, writer: str, mark: WriterMark, expected_version: int
    ) -> int:
        version = await self._db.fetchval(
            _SQL["update_writer_mark"], scope, name, writer, *_mark_columns(mark), expected_version
        )
        if version is None:
            exists = await self.get_writer_mark(scope, name, writer) is not None
            raise conflict_or_missing(exists, f"mark of writer {writer!r} on {scope}/{name}")
        return int(version)

    # --- the round's reads ----------------------------------------------------------------

    async def members(
        self, buckets: Sequence[int], bucket_count: int, after_stream_id: int, limit: int
    ) -> list[WatermarkMember]:
        rows = await self._db.fetch(_SQL["members"], bucket_count, list(buckets), after_stream_id, limit)
        return [_member(row) for row in rows]

    async def member(self, scope: str, name: str, bucket_count: int) -> WatermarkMember | None:
        row = await self._db.fetchrow(_SQL["member"], scope, name, bucket_count)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        return None if row["writers"] is None else _member(row)

    async def segment_ranges(self, wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], SegmentRange]:
        if not wanted:
            return {}
        rows = await self._db.fetch(_SQL["segment_ranges"], [w[0] for w in wanted], [w[1] for w in wanted])
        return {
            (r["stream_id"], r["segment_id"]): SegmentRange(r["segment_id"], r["key_start"], r["key_end"])
            for r in rows
        }

    async def epoch_segments(
        self, wanted: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], tuple[SegmentRange, ...]]:
        if not wanted:
            return {}
        rows = await self._db.fetch(_SQL["epoch_segments"], [w[0] for w in wanted], [w[1] for w in wanted])
        return {
            (r["stream_id"], r["epoch"]): tuple(
                SegmentRange(sid, low, high)
                for sid, low, high in zip(r["segment_ids"], r["key_starts"], r["key_ends"], strict=True)
            )
            for r in rows
        }

    # --- the round's writes ---------------------------------------------------------------

    async def append_watermarks(self, appends: Sequence[WatermarkAppend], keep: int) -> set[int]:
        if not appends:
            return set()
        rows = await self._db.fetch(
            _SQL["append_watermarks"],
            [a.stream_id for a in appends],
            [a.fence.service.value for a in appends],
            [a.fence.bucket for a in appends],
            [a.fence.generation for a in appends],
            [a.after_seq for a in appends],
            [a.watermark.lower_time_bound for a in appends],
            [a.watermark.upper_time_bound for a in appends],
            [json.dumps(stream_cut_to_json(a.watermark.stream_cut)) for a in appends],
            [a.created_at for a in appends],
            keep,
            [a.mark_offset for a in appends],
        )
        return {r["stream_id"] for r in rows}

    async def remove_marks(self, removals: Sequence[MarkChange]) -> int:
        if not removals:
            return 0
        return int(await self._db.fetchval(_SQL["remove_marks"], *_fence_columns(removals)))

    async def set_inactive_since(self, changes: Sequence[MarkChange]) -> int:
        if not changes:
            return 0
        return int(
            await self._db.fetchval(
                _SQL["set_inactive_since"],
                *_fence_columns(changes),
                [c.inactive_since for c in changes],
            )
        )

    # --- listings and the transaction hook ------------------------------------------------

    async def list_watermarks(self, scope: str, name: str, limit: int) -> list[StoredWatermark]:
        rows = await self._db.fetch(_SQL["list_watermarks"], scope, name, limit)
        if not rows:
            raise NotFound(f"stream {scope}/{name} not found")
        return [stored for stored in map(_stored, rows) if stored is not None]

    async def txn_commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> list[tuple[str, int]]:
        if not txns:
            return []
        rows = await self._db.fetch(
            _SQL["txn_commit_times"], scope, name, [t.high for t in txns], [t.low for t in txns]
        )
        return [(r["writer_id"], r["commit_time"]) for r in rows]
