"""The first pending request of each stream (`pending_first_per_key`, read by the commit and abort
dispatchers on every insert): the loose index scan answers exactly what the plain DISTINCT ON
read answered, over random queues (processors, streams, buckets, parked rows, requests in
flight, limits), and it descends requests_pending_by_key instead of sorting the backlog."""

from __future__ import annotations

import random
from typing import Any

from app.domain.requests import Processor
from app.store import queries
from app.store.requests import PgRequestQueue

# The read before migration 0020, verbatim: the reference.
REFERENCE = """
SELECT * FROM (
    SELECT DISTINCT ON (scope, stream)
           id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
           started, last_error, version, parked_at, failures, trace_id
    FROM requests
    WHERE processor = $1 AND bucket = ANY($2::int[]) AND NOT (id = ANY($3::bigint[])) AND parked_at IS NULL
    ORDER BY scope, stream, id
) firsts
ORDER BY id
LIMIT $4
"""
BUCKETS = 8
PROCESSORS = [p.value for p in (Processor.COMMITS, Processor.ABORTS, Processor.REQUESTS)]


def bucket_of(scope: str, stream: str) -> int:
    # A function of the key, as pgc_request_bucket is.
    return sum(map(ord, scope + "/" + stream)) % BUCKETS


async def fill(pool: Any, rng: random.Random, rows: int) -> list[int]:
    keys = [(f"sc{rng.randrange(3)}", f"s{i}") for i in range(rng.randrange(1, 40))]
    records = []
    for n in range(rows):
        scope, stream = rng.choice(keys)
        parked = n if rng.random() < 0.1 else None
        records.append(
            (rng.choice(PROCESSORS), "commit_txns", scope, stream, bucket_of(scope, stream), n, parked)
        )
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO requests (processor, kind, scope, stream, bucket, created_at, parked_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7)",
            records,
        )
        await conn.execute("ANALYZE requests")
        return [r["id"] for r in await conn.fetch("SELECT id FROM requests")]


async def test_the_loose_index_scan_answers_as_the_sorting_read(pool: Any) -> None:
    queue = PgRequestQueue(pool)
    rng = random.Random(20261128)
    for round_ in range(6):
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM requests")
        ids = await fill(pool, rng, rng.choice((5, 200, 3000)))
        for _ in range(15):
            processor = rng.choice(PROCESSORS)
            buckets = sorted(rng.sample(range(BUCKETS), rng.randrange(0, BUCKETS + 1)))
            exclude = sorted(rng.sample(ids, min(len(ids), rng.randrange(0, 30))))
            limit = rng.choice((1, 3, 500))
            async with pool.acquire() as conn:
                want = [r["id"] for r in await conn.fetch(REFERENCE, processor, buckets, exclude, limit)]
            got = await queue.pending(Processor(processor), buckets, exclude, limit, first_per_key=True)
            assert [r.id for r in got] == want, (round_, processor, buckets, exclude, limit)


async def test_a_backlog_of_one_stream_is_not_sorted(pool: Any) -> None:
    """5,000 commit requests of one stream and a few of others: the read descends the index."""
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO requests (processor, kind, scope, stream, bucket, created_at) "
            "VALUES ('commits', 'commit_txns', $1, $2, $3, $4)",
            [("sc", "hot", 1, n) for n in range(5000)] + [("sc", f"s{n}", 2, n) for n in range(20)],
        )
        await conn.execute("ANALYZE requests")
        explain = f"EXPLAIN {queries.load('requests')['pending_first_per_key']}"
        plan = "\n".join(r[0] for r in await conn.fetch(explain, "commits", [1, 2], [], 500))
    assert "requests_pending_by_key" in plan, plan
    assert "Sort Key: requests.scope" not in plan and "Unique" not in plan, plan
