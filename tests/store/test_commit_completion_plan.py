"""A commit batch's completion (`end_commit_batch`) finds the batch's transactions by their keys,
one primary-key lookup each, whatever the statistics say. Taken while no row was COMMITTING, the
statistics once led the planner to read every COMMITTING row of the stream per batch (a hash
over them), so each batch cost more the longer the stream's backlog of committing
transactions."""

from __future__ import annotations

from typing import Any

from app.domain.records import ScalingPolicy, StreamConfig
from app.store import queries
from app.testing.controller import Services

BACKLOG = 3000
BATCH = 100


async def test_the_batch_is_found_by_key_with_a_backlog_the_statistics_do_not_know(
    services: Services, pool: Any
) -> None:
    await services.scopes.create_scope("sc")
    await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    async with pool.acquire() as conn:
        stream_id = await conn.fetchval("SELECT id FROM streams WHERE scope = 'sc' AND name = 's'")
        await conn.executemany(
            "INSERT INTO transactions (stream_id, txn_high, txn_low, epoch, bucket, status, creation_time,"
            " lease_ms, lease_expiry, max_exec_expiry, commit_order)"
            " VALUES ($1, 0, $2, 0, 0, 'OPEN', 0, 10000, 10000, 10000, $2)",
            [(stream_id, low) for low in range(BACKLOG)],
        )
        # The statistics see them all OPEN; then the whole backlog moves to COMMITTING.
        await conn.execute("ANALYZE transactions")
        await conn.execute("UPDATE transactions SET status = 'COMMITTING' WHERE stream_id = $1", stream_id)
        explain = f"EXPLAIN {queries.load('txns')['end_commit_batch']}"
        lows = list(range(BATCH))
        rows = await conn.fetch(explain, "sc", "s", 0, [0] * BATCH, lows, "COMMITTED", None, False, 0)
    plan = "\n".join(r[0] for r in rows)
    assert "transactions_committing" not in plan, plan
    lookups = [line for line in plan.splitlines() if "Scan" in line and " on transactions " in line]
    assert lookups and all("Index Scan using transactions_pkey" in line for line in lookups), plan
