"""A merge finds its sources' chunks by the primary key, however skewed the chunks are.

Most chunk rows belong to a few stream segments, so ANALYZE finds few distinct values in
`segment_chunks.segment`, and a join of the chunks with a merge's list of sources was priced as
a large share of the table per source. On a generic plan (which PostgreSQL settles on for a
prepared statement after five runs when it prices no worse) the merge then hashed its sources
and read every chunk row of every segment, once per transaction commit: 0.45 ms per merge at
2,600 rows, 1.2 ms at 6,800, and on. Migration 0025 gives the column a per-segment estimate, and
the merge statements repeat their join as a filter on it (before the first ANALYZE the
estimate is PostgreSQL's default); these tests build the skew, with statistics and without, and
look at the generic plans of both merge statements (tests/store/test_segment_data.py checks what
merges do).
"""

from __future__ import annotations

import pytest

from app.segmentstore.storage import SegmentKind
from app.store import queries
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

TARGET = "scope/stream/0.#epoch.0"
OTHER = "scope/stream/1.#epoch.0"
SOURCE = TARGET + "#transaction.00000000000000000000000000000001"
CHUNKS_PER_SEGMENT = 4_000


@pytest.fixture(params=["analyzed", "never analyzed"])
async def skewed(db: Database, request: pytest.FixtureRequest) -> Database:
    """Two stream segments holding thousands of chunk rows each and one transaction segment with
    one; statistics that say so, or none yet (autovacuum kept off the table meanwhile)."""
    analyzed = request.param == "analyzed"
    if not analyzed:
        await db.execute("ALTER TABLE segment_chunks SET (autovacuum_enabled = false)")
    storage = PgSegmentStorage(db, ManualClock(5_000))
    kinds: tuple[tuple[str, SegmentKind], ...] = (
        (TARGET, "stream"),
        (OTHER, "stream"),
        (SOURCE, "transaction"),
    )
    for name, kind in kinds:
        await storage.create_segment(name, kind, 0, 0, 0)
    for name in (TARGET, OTHER):
        await db.execute(
            "INSERT INTO segment_chunks (segment, start_offset, data)"
            " SELECT $1, g * 16, '\\x00'::bytea FROM generate_series(0, $2::int - 1) AS g",
            name,
            CHUNKS_PER_SEGMENT,
        )
    await db.execute(
        "INSERT INTO segment_chunks (segment, start_offset, data) VALUES ($1, 0, '\\x01')", SOURCE
    )
    if analyzed:
        await db.execute("ANALYZE segment_chunks")
    return db


async def _generic_plan(db: Database, statement: str, types: str, arguments: str) -> str:
    """EXPLAIN of `statement` prepared with `types` and run with `arguments` (SQL literals) on its
    generic plan: the plan is made without looking at the values."""
    async with db.acquire() as conn:
        await conn.execute(f"PREPARE merge_plan({types}) AS {queries.load('segment_data')[statement]}")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            rows = await conn.fetch(f"EXPLAIN EXECUTE merge_plan({arguments})")
        finally:
            await conn.execute("RESET plan_cache_mode")
            await conn.execute("DEALLOCATE merge_plan")
    return "\n".join(row[0] for row in rows)


def _reads_chunks_by_key(plan: str) -> bool:
    """The chunks are reached through their primary key (an index or a bitmap scan of it), not read
    whole."""
    return "Seq Scan on segment_chunks " not in plan and " on segment_chunks_pkey" in plan


BASE = CHUNKS_PER_SEGMENT * 16
# Each merge statement: its parameters' types, and arguments merging SOURCE into TARGET.
MERGES = {
    "merge_apply": (
        "text, text[], bigint[], bigint, bigint",
        f"'{TARGET}', ARRAY['{SOURCE}'], ARRAY[{BASE}::bigint], {BASE + 1}, 6000",
    ),
    "merges_apply": (
        "text[], text[], bigint[], text[], bigint[], bigint",
        f"ARRAY['{TARGET}'], ARRAY['{SOURCE}'], ARRAY[{BASE}::bigint], ARRAY['{TARGET}'],"
        f" ARRAY[{BASE + 1}::bigint], 6000",
    ),
}


@pytest.mark.parametrize("statement", sorted(MERGES))
async def test_a_merge_reads_its_sources_chunks_by_the_primary_key(skewed: Database, statement: str) -> None:
    types, arguments = MERGES[statement]
    plan = await _generic_plan(skewed, statement, types, arguments)
    assert _reads_chunks_by_key(plan), plan
