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
), keys AS (
    SELECT stream_id, date FROM se UNION SELECT stream_id, date FROM sg UNION SELECT stream_id, date FROM tx
)
SELECT k.date, k.stream_id, s.scope, s.stream,
       COALESCE(se.epochs_created, 0) AS epochs_created, COALESCE(se.scales, 0) AS scales,
       COALESCE(se.splits, 0) AS splits, COALESCE(se.merges, 0) AS merges,
       COALESCE(se.rolling_epochs, 0) AS rolling_epochs,
       COALESCE(se.segments_created, 0) AS segments_created,
       COALESCE(se.segments_sealed, 0) AS segments_sealed,
       se.epoch_end, se.segment_count_end,
       COALESCE(sg.bytes_sealed, 0) AS bytes_sealed,
       COALESCE(tx.txn_committed, 0) AS txn_committed, COALESCE(tx.txn_aborted, 0) AS txn_aborted,
       tx.commit_latency_p50_ms, tx.commit_latency_p90_ms, tx.commit_latency_p99_ms, tx.commit_latency_max_ms
FROM keys k
LEFT JOIN se USING (stream_id, date)
LEFT JOIN sg USING (stream_id, date)
LEFT JOIN tx USING (stream_id, date)
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
    """(date, stream_id) -> every STREAM_DAILY column except bytes_truncated (observed, not derivable)."""
    return {(r["date"], r["stream_id"]): dict(r) for r in await conn.fetch(_PER_STREAM)}


async def daily_latency(conn: Any) -> dict[date, dict[str, Any]]:
    return {r["date"]: dict(r) for r in await conn.fetch(_DAILY_LATENCY)}


async def truncated_bytes(conn: Any) -> dict[int, int]:
    rows = await conn.fetch(
        "SELECT stream_id, truncated_bytes FROM reporting.truncations WHERE truncated_bytes > 0"
    )
    return {r["stream_id"]: r["truncated_bytes"] for r in rows}


async def newest_event_ms(conn: Any) -> int:
    return int(
        await conn.fetchval(
            """SELECT greatest((SELECT max(event_time) FROM reporting.scale_events),
                               (SELECT max(sealed_time) FROM reporting.segments),
                               (SELECT max(completion_time) FROM reporting.transactions))"""
        )
    )


async def fill_txn_details(conn: Any) -> int:
    """Gives the seeded completed transactions (written by COPY, so without the details the
    controller keeps at completion) a request time 1-4999 ms before completion: commit latency."""
    status = await conn.execute(
        """INSERT INTO completed_txn_details (stream_id, txn_high, txn_low, epoch, creation_time, lease_ms,
               lease_expiry, max_exec_expiry, writer_id, commit_time, commit_order, requested_at)
           SELECT c.stream_id, c.txn_high, c.txn_low, (c.txn_high >> 32)::int,
                  c.completion_time - 10000, 30000, c.completion_time + 20000, c.completion_time + 600000,
                  NULL, NULL, NULL, c.completion_time - 1 - (c.txn_low * 7919) % 4999
           FROM completed_txns c
           ON CONFLICT DO NOTHING"""
    )
    return int(status.split()[-1])
