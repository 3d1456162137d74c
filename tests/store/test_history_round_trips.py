"""History queries cost the same number of SQL round trips on a 10-epoch and a 2,000-epoch
stream, and each of those reads is bounded by the (stream_id, epoch) key: the length of the
history turns neither into more queries nor into longer scans (the promise of PgStreamStore
and sql/queries/streams.sql)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from app.domain.records import ScalingPolicy, StreamConfig
from app.services.history import HistoryQueries
from app.store import queries
from app.store.streams import PgStreamStore
from app.testing.controller import Services
from app.testing.history_seed import SeededHistory, seed_replacement_history

SCOPE = "history"
SHORT, LONG = 10, 2_000
_QUERY_METHODS = ("fetch", "fetchrow", "fetchval", "execute", "executemany")

Check = Callable[[HistoryQueries], Awaitable[None]]


class _Counter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def record(self, method: str, args: tuple[Any, ...]) -> None:
        sql = str(args[0]).strip().splitlines()[0] if args else ""
        self.calls.append(f"{method}: {sql}")


class _CountingConnection:
    def __init__(self, conn: Any, counter: _Counter) -> None:
        self._conn = conn
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._conn, name)
        if name not in _QUERY_METHODS:
            return target

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self._counter.record(name, args)
            return await target(*args, **kwargs)

        return counted


class CountingPool:
    """Delegates to an asyncpg pool and records every query, on the pool or an acquired connection."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.counter = _Counter()

    @property
    def round_trips(self) -> int:
        return sum(1 for call in self.counter.calls if not call.startswith("acquire"))

    def reset(self) -> None:
        self.counter.calls.clear()

    @asynccontextmanager
    async def _acquired(self) -> AsyncIterator[_CountingConnection]:
        self.counter.record("acquire", ())
        async with self._pool.acquire() as conn:
            yield _CountingConnection(conn, self.counter)

    def acquire(self) -> Any:
        return self._acquired()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._pool, name)
        if name not in _QUERY_METHODS:
            return target

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.counter.record(name, args)
            return await target(*args, **kwargs)

        return counted


async def _seeded(services: Services, name: str, epochs: int) -> SeededHistory:
    await services.streams.create_stream(SCOPE, name, StreamConfig(ScalingPolicy.fixed(2)))
    async with services.pool.acquire() as conn:
        return await seed_replacement_history(conn, SCOPE, name, epochs)


async def _costs(services: Services, name: str, history: SeededHistory) -> dict[str, tuple[int, list[str]]]:
    """Round trips of each query, each on a fresh store (untrusted cache: nothing mutable is reused)."""
    n = history.epochs
    deep, recent = history.segment(1), history.segment(n - 2)
    head_cut = dict.fromkeys(history.active(2), 0)
    tail_cut = dict.fromkeys(history.active(n), 0)
    beyond_cut = {history.segment(n) + (5 << 32): 0}  # an epoch the stream never had
    # Low side read at epoch 1, high side at the head: valid, and it spans the whole history.
    assert n % 2 == 0, "epoch n must create a high-side segment"
    wide_cut = {history.segment(1): 0, history.segment(n): 0}

    costs: dict[str, tuple[int, list[str]]] = {}

    async def measure(label: str, check: Check) -> None:
        pool = CountingPool(services.pool)
        queries = HistoryQueries(PgStreamStore(pool))
        await check(queries)
        costs[label] = (pool.round_trips, list(pool.counter.calls))

    def successors_of(segment: int, successor: int) -> Check:
        async def check(queries: HistoryQueries) -> None:
            found = await queries.successors(SCOPE, name, segment)
            assert [(s.id, predecessors) for s, predecessors in found] == [(successor, [segment])]

        return check

    def cut_is(cut: dict[int, int], valid: bool) -> Check:
        async def check(queries: HistoryQueries) -> None:
            assert await queries.is_stream_cut_valid(SCOPE, name, cut) is valid

        return check

    async def unsealed(queries: HistoryQueries) -> None:
        assert await queries.successors(SCOPE, name, history.segment(n)) == []

    async def between(queries: HistoryQueries) -> None:
        found = await queries.segments_between(SCOPE, name, tail_cut, {})
        assert found == sorted(tail_cut)

    await measure("successors deep", successors_of(deep, history.segment(3)))
    await measure("successors recent", successors_of(recent, history.segment(n)))
    await measure("successors unsealed", unsealed)
    await measure("cut valid head", cut_is(head_cut, True))
    await measure("cut valid tail", cut_is(tail_cut, True))
    await measure("cut valid wide", cut_is(wide_cut, True))
    await measure("cut unknown epoch", cut_is(beyond_cut, False))
    await measure("segments between tail and head", between)
    return costs


async def test_history_queries_take_the_same_few_round_trips_whatever_the_history_length(
    services: Services,
) -> None:
    await services.scopes.create_scope(SCOPE)
    short = await _costs(services, "short", await _seeded(services, "short", SHORT))
    long = await _costs(services, "long", await _seeded(services, "long", LONG))

    def trips(costs: dict[str, tuple[int, list[str]]]) -> dict[str, int]:
        return {label: count for label, (count, _calls) in costs.items()}

    assert trips(short) == trips(long), (short, long)
    for label, (count, calls) in long.items():
        # segments_between needs the active epoch first (its "to" may be open); the rest one read.
        allowed = 2 if label.startswith("segments between") else 1
        assert count == allowed, (label, calls)
        assert not any(call.startswith("acquire") for call in calls), (label, calls)


# Each index with the columns a history read must bound: the stream, then the record in it.
_KEYS = {
    "epochs_pkey": ("stream_id", "epoch"),
    "segments_pkey": ("stream_id", "segment_id"),
    "epochs_by_creation_time": ("stream_id", "creation_time"),
}


def _unkeyed_scans(plan: dict[str, Any]) -> list[str]:
    """Scans of a per-stream table that a long history (or many streams) makes longer: a
    sequential scan, or an index scan whose condition leaves out a column of the key."""
    found = []
    relation = plan.get("Relation Name")
    if plan["Node Type"] == "Seq Scan" and relation in ("epochs", "segments"):
        found.append(f"Seq Scan on {relation}")
    columns = _KEYS.get(plan.get("Index Name", ""), ())
    condition = plan.get("Index Cond", "")
    if not all(column in condition for column in columns):
        found.append(f"{plan['Node Type']} on {plan['Index Name']}: {condition or 'no condition'}")
    for child in plan.get("Plans", []):
        found.extend(_unkeyed_scans(child))
    return found


@pytest.mark.parametrize(
    "block",
    [
        "get_successors",
        "get_epoch_range",
    ],
)
async def test_history_reads_are_bounded_by_the_stream_key(services: Services, block: str) -> None:
    await services.scopes.create_scope(SCOPE)
    history = await _seeded(services, "long", LONG)
    n = history.epochs
    args = {
        "get_successors": (history.segment(n // 2),),
        "get_epoch_range": (n - 1, n),
    }[block]
    async with services.pool.acquire() as conn:
        await conn.execute("ANALYZE epochs")
        await conn.execute("ANALYZE segments")
        sql = queries.load("streams")[block]
        explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", SCOPE, "long", *args)
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    assert _unkeyed_scans(plan) == []
