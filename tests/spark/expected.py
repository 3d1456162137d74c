"""The pipeline's facts computed again in SQL straight over the `reporting` views, so a test
can compare every figure the lake and the marts hold with PostgreSQL's own answer."""

from __future__ import annotations

from datetime import date
from typing import Any

DAY = "(DATE '1970-01-01' + ({col} / 86400000)::int)"

_PER_STREAM = f"""
WITH se AS (
    SELECT stream_id, {DAY.format(col="event_time")} AS date,
           count(*) AS epochs_created,
           count(*) FILTER (WHERE kind <> 'rolling') AS scales,
           sum(splits) AS splits,
           sum(merges) AS merges,
           count(*) FILTER (WHERE kind = 'rolling') AS rolling_epochs,
           sum(created_count) AS segments_created,
           sum(sealed_count) AS segments_sealed,
           max(epoch) AS epoch_end,
           (array_agg(segments_after ORDER BY epoch DESC))[1] AS segment_count_end
    FROM reporting.scale_events GROUP BY 1, 2
), sg AS (
    SELECT stream_id, {DAY.format(col="sealed_time")} AS date, sum(sealed_size_bytes) AS bytes_sealed
    FROM reporting.segments WHERE sealed_time IS NOT NULL GROUP BY 1, 2
), tx AS (
    SELECT stream_id, {DAY.format(col="completion_time")} AS date,
           count(*) FILTER (WHERE outcome = 'COMMITTED') AS txn_committed,
           count(*) FILTER (WHERE outcome = 'ABORTED') AS txn_aborted,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY commit_latency_ms)
               FILTER (WHERE outcome = 'COMMITTED') AS commit_latency_p50_ms,
           percentile_cont(0.9) WITHIN GROUP (ORDER BY commit_latency_ms)
               FILTER (WHERE outcome = 'COMMITTED') AS commit_latency_p90_ms,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY commit_latency_ms)
               FILTER (WHERE outcome = 'COMMITTED') AS commit_latency_p99_ms,
           max(commit_latency_ms) FILTER (WHERE outcome = 'COMMITTED') AS commit_latency_max_ms
    FROM reporting.transactions WHERE completion_time IS NOT NULL GROUP BY 1, 2
), th AS (
    SELECT stream_id, {DAY.format(col="completion_time")} AS date,
           sum(truncated_bytes) AS bytes_truncated, count(*) AS truncations,
           sum(deleted_count) AS segments_deleted
    FROM reporting.truncation_history GROUP BY 1, 2
), keys AS (
    SELECT stream_id, date FROM se UNION SELECT stream_id, date FROM sg UNION SELECT stream_id, date FROM tx
    UNION SELECT stream_id, date FROM th
)
SELECT k.date, k.stream_id, s.scope, s.stream,
       COALESCE(se.epochs_created, 0) AS epochs_created, COALESCE(se.scales, 0) AS scales,
       COALESCE(se.splits, 0) AS splits, COALESCE(se.merges, 0) AS merges,
       COALESCE(se.rolling_epochs, 0) AS rolling_epochs,
       COALESCE(se.segments_created, 0) AS segments_created,
       COALESCE(se.segments_sealed, 0) AS segments_sealed,
       se.epoch_end, se.segment_count_end,
       COALESCE(sg.bytes_sealed, 0) AS bytes_sealed,
       COALESCE(th.bytes_truncated, 0) AS bytes_truncated, COALESCE(th.truncations, 0) AS truncations,
       COALESCE(th.segments_deleted, 0) AS segments_deleted,
       COALESCE(tx.txn_committed, 0) AS txn_committed, COALESCE(tx.txn_aborted, 0) AS txn_aborted,
       tx.commit_latency_p50_ms, tx.commit_latency_p90_ms, tx.commit_latency_p99_ms, tx.commit_latency_max_ms
FROM keys k
LEFT JOIN se USING (stream_id, date)
LEFT JOIN sg USING (stream_id, date)
LEFT JOIN tx USING (stream_id, date)
LEFT JOIN th USING (stream_id, date)
LEFT JOIN reporting.streams s USING (stream_id)
"""

_DAILY_LATENCY = f"""
SELECT {DAY.format(col="completion_time")} AS date,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY commit_latency_ms) AS commit_latency_p50_ms,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY commit_latency_ms) AS commit_latency_p90_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY commit_latency_ms) AS commit_latency_p99_ms,
       max(commit_latency_ms) AS commit_latency_max_ms
FROM reporting.transactions WHERE outcome = 'COMMITTED' GROUP BY 1
"""

Key = tuple[date, int]


async def stream_day_facts(conn: Any) -> dict[Key, dict[str, Any]]:
    """(date, stream_id) -> every STREAM_DAILY column."""
    return {(r["date"], r["stream_id"]): dict(r) for r in await conn.fetch(_PER_STREAM)}


async def daily_latency(conn: Any) -> dict[date, dict[str, Any]]:
    return {r["date"]: dict(r) for r in await conn.fetch(_DAILY_LATENCY)}


async def truncation_days(conn: Any) -> dict[int, int]:
    """stream_id -> the UTC days on which its truncations completed (history only)."""
    rows = await conn.fetch(
        f"""SELECT stream_id, count(DISTINCT {DAY.format(col="completion_time")}) AS days
            FROM reporting.truncation_history GROUP BY 1"""
    )
    return {r["stream_id"]: r["days"] for r in rows}


async def newest_event_ms(conn: Any) -> int:
    return int(
        await conn.fetchval(
            """SELECT greatest((SELECT max(event_time) FROM reporting.scale_events),
                               (SELECT max(sealed_time) FROM reporting.segments),
                               (SELECT max(completion_time) FROM reporting.transactions),
                               (SELECT max(completion_time) FROM reporting.truncation_history))"""
        )
    )
