"""Completing a truncation writes its history row in the same statement: exactly once per
completion, with the bytes it removed measured from the previous row, and never for a lost race."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.domain.errors import NotFound, WriteConflict
from app.domain.records import ScalingPolicy, StreamConfig, TruncationRecord
from app.domain.streamcuts import completed_truncation
from app.testing.controller import Services

SCOPE, STREAM = "hist", "s"


async def make_stream(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    await make_stream_in_scope(services)


async def make_stream_in_scope(services: Services) -> None:
    await services.streams.create_stream(SCOPE, STREAM, StreamConfig(ScalingPolicy.fixed(2)))


async def start(services: Services, cut: dict[int, int], to_delete: set[int], size_till: int) -> None:
    """Writes an in-progress truncation after the current (completed) record."""
    current = await services.stream_store.get_truncation(SCOPE, STREAM)
    record = TruncationRecord(
        stream_cut=cut,
        span={s: 0 for s in cut},
        deleted_segments=current.value.deleted_segments,
        to_delete=frozenset(to_delete),
        size_till=size_till,
        updating=True,
    )
    await services.stream_store.set_truncation(SCOPE, STREAM, record, current.version)


async def complete(services: Services, at: int) -> int:
    current = await services.stream_store.get_truncation(SCOPE, STREAM)
    return await services.stream_store.complete_truncation(
        SCOPE, STREAM, completed_truncation(current.value), current.value.to_delete, at, current.version
    )


async def history(services: Services) -> list[dict[str, Any]]:
    rows = await services.pool.fetch(
        "SELECT h.completed_at, h.stream_cut, h.truncated_bytes, h.total_truncated_bytes, h.deleted_segments "
        "FROM truncation_history h JOIN streams s ON s.id = h.stream_id "
        "WHERE s.scope = $1 AND s.name = $2 ORDER BY h.id",
        SCOPE,
        STREAM,
    )
    return [dict(r) for r in rows]


async def test_each_completion_adds_one_row_measured_from_the_previous(services: Services) -> None:
    await make_stream(services)
    await start(services, {0: 10, 1: 5}, set(), 15)
    await complete(services, 1_000)
    await start(services, {2: 0, 1: 9}, {0}, 40)
    await complete(services, 2_000)
    assert await history(services) == [
        {
            "completed_at": 1_000,
            "stream_cut": {"0": 10, "1": 5},
            "truncated_bytes": 15,
            "total_truncated_bytes": 15,
            "deleted_segments": [],
        },
        {
            "completed_at": 2_000,
            "stream_cut": {"1": 9, "2": 0},
            "truncated_bytes": 25,
            "total_truncated_bytes": 40,
            "deleted_segments": [0],
        },
    ]
    record = (await services.stream_store.get_truncation(SCOPE, STREAM)).value
    assert (record.deleted_segments, record.to_delete, record.updating) == (
        frozenset({0}),
        frozenset(),
        False,
    )


async def test_a_stale_completion_writes_neither_record_nor_history(services: Services) -> None:
    await make_stream(services)
    await start(services, {0: 10, 1: 5}, set(), 15)
    stale = await services.stream_store.get_truncation(SCOPE, STREAM)
    await complete(services, 1_000)
    with pytest.raises(WriteConflict):
        await services.stream_store.complete_truncation(
            SCOPE, STREAM, completed_truncation(stale.value), frozenset(), 1_500, stale.version
        )
    assert [r["completed_at"] for r in await history(services)] == [1_000]


async def test_racing_completions_log_once(services: Services) -> None:
    await make_stream(services)
    await start(services, {0: 3, 1: 4}, set(), 7)
    read = await services.stream_store.get_truncation(SCOPE, STREAM)

    async def attempt(at: int) -> int | Exception:
        try:
            return await services.stream_store.complete_truncation(
                SCOPE, STREAM, completed_truncation(read.value), frozenset(), at, read.version
            )
        except WriteConflict as lost:
            return lost

    outcomes = await asyncio.gather(attempt(1), attempt(2))
    assert sorted(type(o).__name__ for o in outcomes) == ["WriteConflict", "int"]
    rows = await history(services)
    assert len(rows) == 1 and rows[0]["truncated_bytes"] == 7


async def test_a_missing_stream_or_an_unfinished_record_is_refused(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    done = TruncationRecord(stream_cut={0: 1}, span={0: 0}, size_till=1)
    with pytest.raises(NotFound):
        await services.stream_store.complete_truncation(SCOPE, "nosuch", done, frozenset(), 1, 0)
    await make_stream_in_scope(services)
    with pytest.raises(ValueError):
        await services.stream_store.complete_truncation(
            SCOPE, STREAM, TruncationRecord(stream_cut={0: 1}, span={0: 0}, updating=True), frozenset(), 1, 0
        )
    assert await history(services) == []
