"""Auto-scaling records in PostgreSQL (AutoScaleStore port): the report intake and cold markers.

A report becomes a request row only for a stream that has the segment. A cold marker is written
under its version (insert-if-absent, then compare-and-set), so two writers of one segment's marker
never both win; markers go with their stream (FK cascade).
"""

from __future__ import annotations

from collections.abc import Mapping

from app.domain.errors import NotFound, WriteConflict
from app.domain.records import Versioned
from app.domain.requests import NewRequest
from app.store import queries
from app.store.db import Database, Queries
from app.store.errors import conflict_or_missing
from app.store.requests import insert_request

_SQL = queries.load("autoscale")


class PgAutoScaleStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def check_segment(self, scope: str, name: str, segment_id: int) -> None:
        """NotFound for a missing stream or a segment the stream never had."""
        await self._check_segment(self._db, scope, name, segment_id)

    async def enqueue_report(self, request: NewRequest, segment_id: int) -> int:
        """Queues `request` (an AUTO_SCALE report) after check_segment."""
        async with self._db.transaction() as conn:
            await self._check_segment(conn, request.scope, request.stream, segment_id)
            return await insert_request(conn, request)

    @staticmethod
    async def _check_segment(runner: Queries, scope: str, name: str, segment_id: int) -> None:
        row = await runner.fetchrow(_SQL["check_segment"], scope, name, segment_id)
        if row is None:
            raise NotFound(f"stream {scope}/{name} not found")
        if not row["has_segment"]:
            raise NotFound(f"segment {segment_id} of stream {scope}/{name} not found")

    async def cold_markers(self, scope: str, name: str) -> dict[int, Versioned[int]]:
        """segment id -> (cold until, version); empty for a stream without markers or no stream."""
        rows = await self._db.fetch(_SQL["cold_markers"], scope, name)
        return {row["segment_id"]: Versioned(row["until"], row["version"]) for row in rows}

    async def put_cold_marker(
        self, scope: str, name: str, segment_id: int, until: int, expected_version: int | None
    ) -> int:
        """Creates the marker when `expected_version` is None, else rewrites it at that version."""
        what = f"cold marker of segment {segment_id} of {scope}/{name}"
        if expected_version is None:
            version = await self._db.fetchval(_SQL["insert_cold_marker"], scope, name, segment_id, until)
        else:
            version = await self._db.fetchval(
                _SQL["set_cold_marker"], scope, name, segment_id, until, expected_version
            )
        if version is None:
            exists = await self._db.fetchval(_SQL["stream_exists"], scope, name)
            raise conflict_or_missing(bool(exists), what)
        return int(version)

    async def delete_cold_markers(self, scope: str, name: str, markers: Mapping[int, int]) -> None:
        """Deletes every marker (segment id -> version read) or none: WriteConflict when one was
        rewritten or deleted meanwhile."""
        if not markers:
            return
        segments = list(markers)
        async with self._db.transaction() as conn:
            gone = await conn.fetch(
                _SQL["delete_cold_markers"], scope, name, segments, [markers[s] for s in segments]
            )
            if len(gone) != len(segments):
                raise WriteConflict(f"cold markers of {scope}/{name} were changed concurrently")
