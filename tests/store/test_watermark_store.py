"""PgWatermarkStore against a real database: writer marks (versioned, raced), the round's page
reads, fenced and conditional writes, the bounded watermark history and the listing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import segment_id
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import TxnId
from app.domain.watermarks import SegmentRange, Watermark, WriterMark
from app.ports import MarkChange, WatermarkAppend
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import Services, idle_controller
from tests.store.test_versioned_races import race

SC = "wm"
COUNT = 100


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with idle_controller(db_url, SC) as running:
        yield running


@pytest.fixture
def store(services: Services) -> PgWatermarkStore:
    return PgWatermarkStore(services.pool)


async def make_stream(s: Services, name: str = "s", segments: int = 2, aggregation_ms: int = 0) -> int:
    config = StreamConfig(ScalingPolicy.fixed(segments), timestamp_aggregation_timeout=aggregation_ms)
    await s.streams.create_stream(SC, name, config)
    return int(await s.pool.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = $2", SC, name))


async def own(s: Services, bucket: int, generation: int = 1) -> Fence:
    await s.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) "
        "VALUES ('watermarks', $1, 'test', $2) "
        "ON CONFLICT (service, bucket) DO UPDATE SET owner = 'test', generation = EXCLUDED.generation",
        bucket,
        generation,
    )
    return Fence(BucketService.WATERMARKS, bucket, generation)


def wm(low: int, cut: dict[SegmentRange, int] | None = None) -> Watermark:
    return Watermark(low, low + 1, cut if cut is not None else {SegmentRange(0, 0.0, 0.5): low})


# --- marks ---------------------------------------------------------------------------------


async def test_mark_round_trip(services: Services, store: PgWatermarkStore) -> None:
    await make_stream(services)
    assert await store.get_writer_mark(SC, "s", "w") is None
    assert await store.create_writer_mark(SC, "s", "w", WriterMark(5, {0: 10, 1: 20})) == 0
    found = await store.get_writer_mark(SC, "s", "w")
    assert found is not None and found.value == WriterMark(5, {0: 10, 1: 20}) and found.version == 0
    assert await store.update_writer_mark(SC, "s", "w", WriterMark(6, {}, alive=False), 0) == 1
    found = await store.get_writer_mark(SC, "s", "w")
    assert found is not None and found.value == WriterMark(6, {}, alive=False)


async def test_mark_errors(services: Services, store: PgWatermarkStore) -> None:
    await make_stream(services)
    with pytest.raises(NotFound):
        await store.get_writer_mark(SC, "missing", "w")
    with pytest.raises(NotFound):
        await store.create_writer_mark(SC, "missing", "w", WriterMark(1, {}))
    with pytest.raises(NotFound):
        await store.update_writer_mark(SC, "s", "nobody", WriterMark(1, {}), 0)
    await store.create_writer_mark(SC, "s", "w", WriterMark(1, {}))
    with pytest.raises(WriteConflict):
        await store.create_writer_mark(SC, "s", "w", WriterMark(2, {}))
    with pytest.raises(WriteConflict):
        await store.update_writer_mark(SC, "s", "w", WriterMark(2, {}), 7)


async def test_marks_and_watermarks_go_with_the_stream(services: Services, store: PgWatermarkStore) -> None:
    sid = await make_stream(services)
    await store.create_writer_mark(SC, "s", "w", WriterMark(1, {0: 1}))
    fence = await own(services, stream_bucket(SC, "s", COUNT))
    assert await store.append_watermarks([WatermarkAppend(sid, fence, 0, wm(1), 1)], 10) == {sid}
    await services.pool.execute("DELETE FROM streams WHERE id = $1", sid)
    for table in ("writer_marks", "watermarks"):
        assert await services.pool.fetchval(f"SELECT count(*) FROM {table}") == 0


# --- the two-writer races on writer_marks (registered in tests/store/test_versioned_races.py) ---


async def test_two_notes_at_the_same_version_exactly_one_wins(
    services: Services, store: PgWatermarkStore
) -> None:
    await make_stream(services)
    await store.create_writer_mark(SC, "s", "w", WriterMark(1, {0: 1}))
    marks = (WriterMark(10, {0: 10}), WriterMark(20, {0: 20}))
    results = await race(
        services,
        "writer_marks",
        [
            lambda: store.update_writer_mark(SC, "s", "w", marks[0], 0),
            lambda: store.update_writer_mark(SC, "s", "w", marks[1], 0),
        ],
    )
    winners = [i for i, r in enumerate(results) if r == 1]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    found = await store.get_writer_mark(SC, "s", "w")
    assert found is not None and (found.value, found.version) == (marks[winners[0]], 1)


async def test_two_first_notes_exactly_one_creates(services: Services, store: PgWatermarkStore) -> None:
    await make_stream(services)
    marks = (WriterMark(10, {0: 10}), WriterMark(20, {0: 20}))
    results = await race(
        services,
        "writer_marks",
        [
            lambda: store.create_writer_mark(SC, "s", "w", marks[0]),
            lambda: store.create_writer_mark(SC, "s", "w", marks[1]),
        ],
    )
    winners = [i for i, r in enumerate(results) if r == 0]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    found = await store.get_writer_mark(SC, "s", "w")
    assert found is not None and (found.value, found.version) == (marks[winners[0]], 0)


async def test_a_note_and_the_rounds_bookkeeping_race_on_the_version(
    services: Services, store: PgWatermarkStore
) -> None:
    sid = await make_stream(services)
    fence = await own(services, stream_bucket(SC, "s", COUNT))
    await store.create_writer_mark(SC, "s", "w", WriterMark(1, {0: 1}))

    async def track() -> int:
        changed = await store.set_inactive_since([MarkChange(sid, fence, "w", 0, 777)])
        if not changed:
            raise WriteConflict("bookkeeping lost")
        return 1

    results = await race(
        services,
        "writer_marks",
        [lambda: store.update_writer_mark(SC, "s", "w", WriterMark(2, {0: 2}), 0), track],
    )
    assert sorted(type(r).__name__ for r in results) == ["WriteConflict", "int"], results
    row = await services.pool.fetchrow("SELECT mark_time, inactive_since, version FROM writer_marks")
    assert row["version"] == 1
    assert (row["mark_time"], row["inactive_since"]) in ((2, None), (1, 777))


# --- the round's reads -------------------------------------------------------------------------


async def test_members_are_streams_with_marks_in_the_given_buckets(
    services: Services, store: PgWatermarkStore
) -> None:
    ids = {name: await make_stream(services, name, aggregation_ms=5) for name in ("a", "b", "c", "quiet")}
    for name in ("a", "b", "c"):
        await store.create_writer_mark(SC, name, "w2", WriterMark(2, {1: 20}))
        await store.create_writer_mark(SC, name, "w1", WriterMark(1, {0: 10}))
    await services.scopes.create_scope("_system")
    await services.stream_store.create_stream_metadata(
        "_system", "internal", StreamConfig(ScalingPolicy.fixed(1)), 1
    )
    await store.create_writer_mark("_system", "internal", "w", WriterMark(1, {}))

    everything = await store.members(list(range(COUNT)), COUNT, 0, 100)
    assert [m.stream for m in everything] == ["a", "b", "c"]  # id order; no quiet, no _system
    first = everything[0]
    assert first.stream_id == ids["a"] and first.scope == SC and first.timeout_ms == 5
    assert first.bucket == stream_bucket(SC, "a", COUNT)
    assert [(t.writer, t.mark, t.inactive_since, t.version) for t in first.marks] == [
        ("w1", WriterMark(1, {0: 10}), None, 0),
        ("w2", WriterMark(2, {1: 20}), None, 0),
    ]
    assert first.latest is None

    # Pages by stream id, and only the asked buckets.
    page = await store.members(list(range(COUNT)), COUNT, ids["a"], 1)
    assert [m.stream for m in page] == ["b"]
    assert [m.stream for m in await store.members([stream_bucket(SC, "c", COUNT)], COUNT, 0, 100)] == ["c"]
    assert [m.stream for m in await store.members(list(range(COUNT)), 1, 0, 100)] == ["a", "b", "c"]

    member = await store.member(SC, "a", COUNT)
    assert member == first
    assert await store.member(SC, "quiet", COUNT) is None
    with pytest.raises(NotFound):
        await store.member(SC, "missing", COUNT)


async def test_latest_watermark_comes_with_the_member(services: Services, store: PgWatermarkStore) -> None:
    sid = await make_stream(services)
    await store.create_writer_mark(SC, "s", "w", WriterMark(1, {}))
    fence = await own(services, stream_bucket(SC, "s", COUNT))
    cut = {SegmentRange(0, 0.0, 0.5): 7, SegmentRange(segment_id(2, 1), 0.5, 1.0): 0}
    await store.append_watermarks([WatermarkAppend(sid, fence, 0, wm(1), 10)], 10)
    await store.append_watermarks([WatermarkAppend(sid, fence, 1, Watermark(5, 9, cut), 20)], 10)
    member = await store.member(SC, "s", COUNT)
    assert member is not None and member.latest is not None
    assert (member.latest.seq, member.latest.created_at) == (2, 20)
    assert member.latest.watermark == Watermark(5, 9, cut)
    got = member.latest.watermark.stream_cut
    assert [(s.segment, s.low, s.high, o) for s, o in got.items()] == [
        (0, 0.0, 0.5, 7),
        (segment_id(2, 1), 0.5, 1.0, 0),
    ]


async def test_segment_ranges_and_epochs_in_one_read_each(
    services: Services, store: PgWatermarkStore
) -> None:
    a = await make_stream(services, "a", segments=2)
    b = await make_stream(services, "b", segments=4)
    found = await store.segment_ranges([(a, 0), (a, 1), (b, 3), (b, 99), (a + b + 1000, 0)])
    assert set(found) == {(a, 0), (a, 1), (b, 3)}
    assert (found[(a, 1)].low, found[(a, 1)].high) == (0.5, 1.0)
    assert (found[(b, 3)].low, found[(b, 3)].high) == (0.75, 1.0)
    epochs = await store.epoch_segments([(a, 0), (b, 0), (b, 5)])
    assert set(epochs) == {(a, 0), (b, 0)}
    assert [s.segment for s in epochs[(b, 0)]] == [0, 1, 2, 3]
    assert await store.segment_ranges([]) == {} and await store.epoch_segments([]) == {}


# --- the round's writes ------------------------------------------------------------------------


async def test_append_is_conditional_on_the_sequence_and_the_fence(
    services: Services, store: PgWatermarkStore
) -> None:
    sid = await make_stream(services)
    fence = await own(services, stream_bucket(SC, "s", COUNT), generation=3)
    stale = Fence(fence.service, fence.bucket, 2)
    other_bucket = Fence(fence.service, (fence.bucket + 1) % COUNT, 3)

    assert await store.append_watermarks([WatermarkAppend(sid, stale, 0, wm(1), 1)], 10) == set()
    assert await store.append_watermarks([WatermarkAppend(sid, other_bucket, 0, wm(1), 1)], 10) == set()
    assert await store.append_watermarks([WatermarkAppend(sid, fence, 1, wm(1), 1)], 10) == set()
    assert await store.append_watermarks([WatermarkAppend(sid, fence, 0, wm(1), 1)], 10) == {sid}
    # A second round that read the same (empty) history loses: its number is taken.
    assert await store.append_watermarks([WatermarkAppend(sid, fence, 0, wm(2), 2)], 10) == set()
    assert [w.watermark.lower_time_bound for w in await store.list_watermarks(SC, "s", 10)] == [1]


async def test_appends_of_many_streams_in_one_call(services: Services, store: PgWatermarkStore) -> None:
    ids = [await make_stream(services, f"s{i}") for i in range(3)]
    fences = {i: await own(services, stream_bucket(SC, f"s{n}", COUNT)) for n, i in enumerate(ids)}
    landed = await store.append_watermarks(
        [WatermarkAppend(i, fences[i], 0, wm(n + 1), 5) for n, i in enumerate(ids)]
        + [WatermarkAppend(ids[0], fences[ids[0]], 7, wm(9), 5)],
        10,
    )
    assert landed == set(ids)


async def test_an_append_for_a_deleted_stream_is_left_out(
    services: Services, store: PgWatermarkStore
) -> None:
    gone, kept = await make_stream(services, "gone"), await make_stream(services, "kept")
    fences = {
        i: await own(services, stream_bucket(SC, n, COUNT)) for n, i in (("gone", gone), ("kept", kept))
    }
    await services.pool.execute("DELETE FROM streams WHERE id = $1", gone)
    appends = [WatermarkAppend(i, fences[i], 0, wm(1), 1) for i in (gone, kept)]
    assert await store.append_watermarks(appends, 10) == {kept}


async def test_history_is_trimmed_to_the_most_recent(services: Services, store: PgWatermarkStore) -> None:
    sid = await make_stream(services)
    fence = await own(services, stream_bucket(SC, "s", COUNT))
    for seq in range(7):
        assert await store.append_watermarks([WatermarkAppend(sid, fence, seq, wm(seq + 1), seq)], 3) == {sid}
    listed = await store.list_watermarks(SC, "s", 100)
    assert [w.seq for w in listed] == [7, 6, 5]
    assert [w.watermark.lower_time_bound for w in await store.list_watermarks(SC, "s", 2)] == [7, 6]


async def test_listing_errors_and_empty(services: Services, store: PgWatermarkStore) -> None:
    await make_stream(services)
    assert await store.list_watermarks(SC, "s", 10) == []
    with pytest.raises(NotFound):
        await store.list_watermarks(SC, "missing", 10)


async def test_removals_and_bookkeeping_are_fenced_and_versioned(
    services: Services, store: PgWatermarkStore
) -> None:
    sid = await make_stream(services)
    fence = await own(services, stream_bucket(SC, "s", COUNT), generation=5)
    stale = Fence(fence.service, fence.bucket, 4)
    for writer in ("a", "b", "c"):
        await store.create_writer_mark(SC, "s", writer, WriterMark(1, {}))

    assert await store.set_inactive_since([MarkChange(sid, stale, "a", 0, 100)]) == 0
    assert await store.set_inactive_since([MarkChange(sid, fence, "a", 3, 100)]) == 0
    assert (
        await store.set_inactive_since(
            [MarkChange(sid, fence, "a", 0, 100), MarkChange(sid, fence, "b", 0, 200)]
        )
        == 2
    )
    assert await store.set_inactive_since([MarkChange(sid, fence, "b", 1, None)]) == 1
    rows = await rows_of(services)
    assert rows == {"a": (100, 1), "b": (None, 2), "c": (None, 0)}

    assert await store.remove_marks([MarkChange(sid, stale, "c", 0)]) == 0
    assert await store.remove_marks([MarkChange(sid, fence, "a", 0)]) == 0  # changed since read
    assert await store.remove_marks([MarkChange(sid, fence, "a", 1), MarkChange(sid, fence, "c", 0)]) == 2
    assert set(await rows_of(services)) == {"b"}
    assert await store.remove_marks([]) == 0 and await store.set_inactive_since([]) == 0


async def rows_of(s: Services) -> dict[str, Any]:
    rows = await s.pool.fetch("SELECT writer, inactive_since, version FROM writer_marks")
    return {r["writer"]: (r["inactive_since"], r["version"]) for r in rows}


async def test_txn_commit_times_reads_only_marked_commits(
    services: Services, store: PgWatermarkStore
) -> None:
    await make_stream(services)
    made = [await services.transactions.create(SC, "s", 10_000) for _ in range(3)]
    await services.transactions.commit(SC, "s", made[0].txn, "w1", 50)
    await services.transactions.commit(SC, "s", made[1].txn, "", 60)  # no writer: no mark
    got = await store.txn_commit_times(SC, "s", [m.txn for m in made] + [TxnId(1, 1)])
    assert got == [("w1", 50)]
    assert await store.txn_commit_times(SC, "s", []) == []
