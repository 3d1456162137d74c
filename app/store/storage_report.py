"""Where the embedded segment stores keep a stream's bytes, read from their tables
(sql/queries/storage_report.sql)."""

from __future__ import annotations

from app.domain.segment_storage import SegmentBytes
from app.store import queries
from app.store.db import Database

_SQL = queries.load("storage_report")


class PgSegmentStorageReport:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def stream_segments(self, scope: str, stream: str) -> list[SegmentBytes]:
        rows = await self._db.fetch(_SQL["stream_segments"], f"{scope}/{stream}/")
        return [
            SegmentBytes(
                segment=str(r["name"]),
                kind=str(r["kind"]),
                start_offset=int(r["start_offset"]),
                length=int(r["length"]),
                sealed=bool(r["sealed"]),
                postgres_bytes=int(r["postgres_bytes"]),
                postgres_chunks=int(r["postgres_chunks"]),
                tiered_bytes=int(r["tiered_bytes"]),
                tiered_chunks=int(r["tiered_chunks"]),
            )
            for r in rows
        ]
