"""reporting.streams and reporting.segments read flat at any history length (migration 0019's
totals and the shard-of-its-creation-epoch lookup) and give exactly the rows their previous,
linear definitions gave: kept below as OLD_*, compared row for row over a history made by the
real services (splits, merges, a repartition, a rolling transaction, commits, aborts, two
truncations, a sealed and a deleted stream), the COPY seeder's streams and the long-history
grower's streams, whole and through the window and stream-row reads analysts and the pipeline do.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from app.dev.history_gen import SeedSpec
from app.dev.long_history import seed_long_stream
from app.dev.seed import seed_history
from tests.store.test_reporting_views import History, fetch
from tests.store.test_reporting_views import history as history  # the module's fixture

# The definitions before migration 0019, verbatim but for their names.
OLD_STREAMS_TOTALS = """
SELECT s.id AS stream_id, g.segments_created, g.segments_sealed,
       (SELECT COALESCE(sum(kv.value::bigint), 0)::bigint
        FROM sealed_size_shards z CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv
        WHERE z.stream_id = s.id) AS sealed_bytes
FROM streams s
LEFT JOIN LATERAL (
    SELECT count(*) AS segments_created, count(x.sealed_epoch) AS segments_sealed
    FROM segments x WHERE x.stream_id = s.id
) g ON true"""

OLD_SEGMENTS = """
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       g.segment_id,
       g.segment_number,
       g.creation_epoch,
       g.creation_time,
       g.key_start,
       g.key_end,
       g.rolling_copy,
       g.sealed_epoch,
       g.sealed_time,
       g.sealed_size_bytes,
       g.sealed_time - g.creation_time AS lifetime_ms,
       g.deleted_by_truncation
FROM streams s
CROSS JOIN LATERAL (
    WITH sz AS MATERIALIZED (
        SELECT kv.key AS segment_key, kv.value::bigint AS size
        FROM sealed_size_shards z CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv
        WHERE z.stream_id = s.id
    )
    SELECT x.segment_id,
           x.number AS segment_number,
           x.creation_epoch,
           x.creation_time,
           x.key_start,
           x.key_end,
           COALESCE(ce.epoch <> ce.reference_epoch, false) AS rolling_copy,
           x.sealed_epoch,
           se.creation_time AS sealed_time,
           sz.size AS sealed_size_bytes,
           d.segment_key IS NOT NULL AS deleted_by_truncation
    FROM segments x
    LEFT JOIN epochs ce ON ce.stream_id = x.stream_id AND ce.epoch = x.creation_epoch
    LEFT JOIN epochs se ON se.stream_id = x.stream_id AND se.epoch = x.sealed_epoch
    LEFT JOIN sz ON sz.segment_key = x.segment_id::text
    LEFT JOIN (
        SELECT DISTINCT u.segment_id::text AS segment_key
        FROM stream_truncations t
        CROSS JOIN LATERAL unnest(
            t.deleted_segments || CASE WHEN t.updating THEN '{}'::bigint[] ELSE t.to_delete END
        ) AS u(segment_id)
        WHERE t.stream_id = s.id
    ) d ON d.segment_key = x.segment_id::text
    WHERE x.stream_id = s.id
) g"""

END = 1_800_000_000_000
DAY = 86_400_000
COPIED = SeedSpec(
    streams=4,
    epochs_per_stream=60,
    txns_per_stream=8,
    seed=7,
    scope_prefix="copied",
    start_ms=END - DAY,
    span_ms=DAY,
)
LONG = SeedSpec(
    streams=1, epochs_per_stream=1, scope_prefix="long", start_ms=END - 86_400_000, span_ms=86_400_000
)
SHORT = SeedSpec(
    streams=1, epochs_per_stream=1, scope_prefix="short", start_ms=END - 86_400_000, span_ms=86_400_000
)
# Past ~150 shards the planner looks each segment of a window up in its shard instead of hashing
# all of the stream's shards (flat from there on; below, hashing them all is the cheaper plan).
LONG_EPOCHS = 200_000
SHORT_EPOCHS = 2_000
WINDOW = 100


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(repr(v) for v in row.values())


@pytest.fixture(scope="module")
async def grown(history: History) -> AsyncIterator[History]:
    """The services' history, plus COPY-seeded streams and two grown ones (the long one in chunks,
    so the grower's shard merges update shards that earlier chunks wrote), analysed."""
    await seed_history(history.url, COPIED, analyze=False)
    await seed_long_stream(history.url, LONG, LONG_EPOCHS, chunk_epochs=120_000, analyze=False)
    await seed_long_stream(history.url, SHORT, SHORT_EPOCHS, analyze=False)
    conn = await asyncpg.connect(history.url)
    try:
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    yield history


async def both(
    h: History, new: str, old: str, *args: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows_new = await fetch(h.url, new, *args)
    rows_old = await fetch(h.url, old, *args)
    return sorted(rows_new, key=key), sorted(rows_old, key=key)


async def stream_ids(h: History) -> dict[str, int]:
    rows = await fetch(h.url, "SELECT scope, name, id FROM streams")
    return {f"{r['scope']}/{r['name']}": r["id"] for r in rows}


async def test_the_history_covers_every_kind_of_write(grown: History) -> None:
    # What the comparisons below are worth: rolls, splits and merges, truncations, sealed sizes,
    # shards written by all three writers, and a deleted stream whose totals went with it.
    kinds = await fetch(grown.url, "SELECT DISTINCT kind FROM reporting.scale_events")
    assert {r["kind"] for r in kinds} >= {"split", "merge", "rolling", "other"}
    counts = (
        await fetch(
            grown.url,
            "SELECT (SELECT count(*) FROM reporting.segments WHERE deleted_by_truncation) AS deleted,"
            " (SELECT count(*) FROM reporting.segments WHERE sealed_size_bytes IS NOT NULL) AS sized,"
            " (SELECT count(DISTINCT stream_id) FROM sealed_size_shards) AS sharded,"
            " (SELECT count(*) FROM stream_report_totals t"
            "  WHERE NOT EXISTS (SELECT 1 FROM streams s WHERE s.id = t.stream_id)) AS orphans",
        )
    )[0]
    assert counts["deleted"] > 0 and counts["sized"] > LONG_EPOCHS and counts["sharded"] >= 6, counts
    assert counts["orphans"] == 0


async def test_every_streams_totals_equal_the_counted_ones(grown: History) -> None:
    new, old = await both(
        grown,
        "SELECT stream_id, segments_created, segments_sealed, sealed_bytes FROM reporting.streams",
        OLD_STREAMS_TOTALS,
    )
    assert len(new) == len(await stream_ids(grown)) and new == old
    # The whole view, once more, against the columns that did not change.
    whole = await fetch(grown.url, "SELECT * FROM reporting.streams")
    assert sorted(r["stream_id"] for r in whole) == sorted(r["stream_id"] for r in new)


async def test_every_segment_row_equals_the_old_definitions(grown: History) -> None:
    new, old = await both(grown, "SELECT * FROM reporting.segments", OLD_SEGMENTS)
    assert len(new) > LONG_EPOCHS + SHORT_EPOCHS and new == old


@pytest.mark.parametrize("name", ["rep/main", "rep/other", "long0/stream0", "copied0/stream1"])
async def test_the_reads_analysts_and_the_pipeline_make_are_equal(grown: History, name: str) -> None:
    sid = (await stream_ids(grown))[name]
    bounds = (
        await fetch(
            grown.url,
            "SELECT min(creation_time) AS lo, max(creation_time) AS hi,"
            " percentile_disc(0.5) WITHIN GROUP (ORDER BY creation_time) AS mid"
            " FROM segments WHERE stream_id = $1",
            sid,
        )
    )[0]
    reads = [
        ("WHERE stream_id = $1", (sid,)),
        ("WHERE stream_id = $1 AND creation_time BETWEEN $2 AND $3", (sid, bounds["mid"], bounds["hi"])),
        ("WHERE stream_id = $1 AND creation_time BETWEEN $2 AND $3", (sid, bounds["lo"], bounds["mid"])),
        ("WHERE stream_id BETWEEN $1 AND $1 + 3 AND sealed_time > $2", (sid, bounds["mid"])),
    ]
    for where, args in reads:
        new, old = await both(
            grown,
            f"SELECT * FROM reporting.segments {where}",
            f"SELECT * FROM ({OLD_SEGMENTS}) o {where}",
            *args,
        )
        assert new == old, where
        assert new or "sealed_time" in where, where


async def blocks(url: str, sql: str, *args: Any) -> tuple[int, str]:
    """Buffers the read touched (hit or read): what it costs, whatever else the machine does;
    and its plan, for the message when it costs too much."""
    conn = await asyncpg.connect(url)
    try:
        plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
        text = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args))
    finally:
        await conn.close()
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"]), text


def shard_rows(plan: dict[str, Any]) -> int:
    """Rows read from sealed_size_shards anywhere in an EXPLAIN ANALYZE plan (rows x loops)."""
    own = (
        plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == "sealed_size_shards" else 0
    )
    return int(own) + sum(shard_rows(p) for p in plan.get("Plans", []))


async def test_a_window_reads_only_its_segments_shards(grown: History) -> None:
    sid = (await stream_ids(grown))["long0/stream0"]
    middle = LONG_EPOCHS // 2
    times = await fetch(
        grown.url,
        "SELECT creation_time FROM epochs WHERE stream_id = $1 AND epoch IN ($2, $3) ORDER BY epoch",
        sid, middle, middle + WINDOW - 1,
    )  # fmt: skip
    lo, hi = (r["creation_time"] for r in times)
    window = "SELECT * FROM reporting.segments WHERE stream_id = $1 AND creation_time BETWEEN $2 AND $3"
    rows = await fetch(grown.url, window, sid, lo, hi)
    assert len(rows) == WINDOW and all(r["sealed_size_bytes"] for r in rows)
    conn = await asyncpg.connect(grown.url)
    try:
        plan = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {window}", sid, lo, hi))[0][
            "Plan"
        ]
        text = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {window}", sid, lo, hi))
    finally:
        await conn.close()
    # One shard row per segment at most (the planner may also share them): never the stream's
    # LONG_EPOCHS / 1000 shards, and through the creation-time index, not a scan of the stream.
    assert shard_rows(plan) <= WINDOW, text
    assert "segments_by_creation_time" in text, text


async def test_a_stream_row_costs_the_same_at_a_hundred_times_the_history(grown: History) -> None:
    ids = await stream_ids(grown)
    row = (
        "SELECT current_epoch, segment_count, segments_created, sealed_bytes FROM reporting.streams"
        " WHERE stream_id = $1"
    )
    short, long = [await blocks(grown.url, row, ids[name]) for name in ("short0/stream0", "long0/stream0")]
    assert long[0] <= 1.5 * short[0], f"{short[0]} -> {long[0]} buffers\n{short[1]}\n{long[1]}"
