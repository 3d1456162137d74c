"""The retention store against a real PostgreSQL: retention sets kept in recording order,
fenced writes that write nothing once the bucket's generation moved on, the membership
listing of retention buckets, and subscriber records under their version, including the
forced two-writer race for stream_subscribers (registered in test_versioned_races.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.errors import NotFound, WriteConflict
from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    StreamConfig,
    StreamState,
    TruncationRecord,
)
from app.domain.requests import NewRequest, Processor, RequestKind
from app.domain.retention import StreamCutRecord, SubscriberRecord
from app.ports import RetentionWrite
from app.store.retention import PgRetentionStore
from app.testing.controller import Services, idle_controller
from tests.store.test_versioned_races import race

SC = "retscope"
ST = "s"
FENCE = Fence(BucketService.RETENTION, 0, 1)
SIZE_POLICY = RetentionPolicy(RetentionType.SIZE, 100, 1000)
RG = uuid.UUID("6b0d8e5e-0f3c-4f0e-9d58-3f1f3f3f3f3f")
REQUEST_BUCKETS = list(range(16))


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with idle_controller(db_url, SC) as running:
        yield running


@pytest.fixture
def store(services: Services) -> PgRetentionStore:
    return PgRetentionStore(services.pool)


async def make_stream(s: Services, name: str = ST, retention: RetentionPolicy | None = SIZE_POLICY) -> None:
    await s.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(2), retention=retention))


async def own(s: Services, bucket: int = 0, generation: int = 1) -> None:
    await s.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) VALUES ('retention', $1, 'test', $2) "
        "ON CONFLICT (service, bucket) DO UPDATE SET generation = EXCLUDED.generation",
        bucket,
        generation,
    )


def record(time: int, size: int = 0, cut: dict[int, int] | None = None) -> StreamCutRecord:
    return StreamCutRecord(time, size, cut if cut is not None else {0: time, 1: time})


# --- the retention set ---------------------------------------------------------------------------


async def test_records_are_appended_in_recording_order(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    await own(services)
    assert await store.add_record(SC, ST, record(10, 19, {0: 9, 1: 10}), FENCE) is RetentionWrite.WRITTEN
    assert await store.add_record(SC, ST, record(20, 100), FENCE) is RetentionWrite.WRITTEN
    # Not newer than the latest: left out, whatever its content.
    assert await store.add_record(SC, ST, record(20, 5), FENCE) is RetentionWrite.UNCHANGED
    assert await store.add_record(SC, ST, record(15, 5), FENCE) is RetentionWrite.UNCHANGED

    context = await store.get_context(SC, ST)
    assert context.records == (record(10, 19, {0: 9, 1: 10}), record(20, 100))
    assert context.policy == SIZE_POLICY
    assert context.state is StreamState.ACTIVE
    assert context.active_epoch == 0
    assert context.truncation.value == TruncationRecord()
    assert context.subscriber_cuts == ()


async def test_purge_removes_the_records_at_or_before_a_time(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await own(services)
    for time in (10, 20, 30):
        await store.add_record(SC, ST, record(time), FENCE)
    assert await store.purge_records(SC, ST, 20, FENCE) is RetentionWrite.WRITTEN
    assert [r.recording_time for r in (await store.get_context(SC, ST)).records] == [30]
    assert await store.purge_records(SC, ST, 20, FENCE) is RetentionWrite.UNCHANGED


async def test_deleting_the_stream_deletes_its_records_and_subscribers(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await own(services)
    await store.add_record(SC, ST, record(10), FENCE)
    await store.insert_subscriber(SC, ST, SubscriberRecord(f"{SC}/rg", RG, 0, {}, 1))
    await services.stream_store.delete_stream(SC, ST)
    assert await services.pool.fetchval("SELECT count(*) FROM retention_set") == 0
    assert await services.pool.fetchval("SELECT count(*) FROM stream_subscribers") == 0
    with pytest.raises(NotFound):
        await store.get_context(SC, ST)


async def test_missing_stream_is_not_found(services: Services, store: PgRetentionStore) -> None:
    await own(services)
    with pytest.raises(NotFound):
        await store.add_record(SC, "missing", record(1), FENCE)
    with pytest.raises(NotFound):
        await store.purge_records(SC, "missing", 1, FENCE)
    with pytest.raises(NotFound):
        await store.get_context(SC, "missing")
    request = NewRequest(RequestKind.TRUNCATE_STREAM, SC, "missing", 1)
    with pytest.raises(NotFound):
        await store.start_truncation(SC, "missing", TruncationRecord(updating=True), 0, request, FENCE)
    with pytest.raises(NotFound):
        await store.list_subscribers(SC, "missing")
    with pytest.raises(NotFound):
        await store.get_subscriber(SC, "missing", "x/y")
    with pytest.raises(NotFound):
        await store.insert_subscriber(SC, "missing", SubscriberRecord("x/y", RG, 0))
    with pytest.raises(NotFound):
        await store.set_subscriber(SC, "missing", SubscriberRecord("x/y", RG, 0), 0)
    with pytest.raises(NotFound):
        await store.delete_subscriber(SC, "missing", "x/y", 0)


# --- fencing -------------------------------------------------------------------------------------


async def test_writes_without_ownership_are_fenced(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    # No owner row at all: nothing may be written.
    assert await store.add_record(SC, ST, record(10), FENCE) is RetentionWrite.FENCED
    assert (await store.get_context(SC, ST)).records == ()


async def test_a_stale_generation_writes_nothing(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    await own(services, generation=1)
    await store.add_record(SC, ST, record(10), FENCE)
    await own(services, generation=2)  # the bucket was claimed again

    assert await store.add_record(SC, ST, record(20), FENCE) is RetentionWrite.FENCED
    assert await store.purge_records(SC, ST, 10, FENCE) is RetentionWrite.FENCED
    truncation = await services.stream_store.get_truncation(SC, ST)
    new = TruncationRecord(stream_cut={0: 1, 1: 1}, span={0: 0, 1: 0}, size_till=2, updating=True)
    request = NewRequest(RequestKind.TRUNCATE_STREAM, SC, ST, 1)
    assert (
        await store.start_truncation(SC, ST, new, truncation.version, request, FENCE) is RetentionWrite.FENCED
    )

    assert [r.recording_time for r in (await store.get_context(SC, ST)).records] == [10]
    assert (await services.stream_store.get_truncation(SC, ST)) == truncation
    assert await services.requests.pending(Processor.REQUESTS, REQUEST_BUCKETS, [], 10) == []
    # The current generation writes.
    current = Fence(BucketService.RETENTION, 0, 2)
    assert await store.add_record(SC, ST, record(20), current) is RetentionWrite.WRITTEN


async def test_a_fence_of_another_bucket_or_service_does_not_count(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await own(services, bucket=1, generation=1)
    await services.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) VALUES ('watermarks', 0, 'test', 1)"
    )
    assert await store.add_record(SC, ST, record(10), FENCE) is RetentionWrite.FENCED
    assert await store.add_record(SC, ST, record(10), Fence(BucketService.RETENTION, 1, 1)) is (
        RetentionWrite.WRITTEN
    )


# --- starting a truncation -------------------------------------------------------------------------


async def test_start_truncation_writes_the_record_with_its_request(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await own(services)
    before = await services.stream_store.get_truncation(SC, ST)
    new = TruncationRecord(stream_cut={0: 1, 1: 2}, span={0: 0, 1: 0}, size_till=3, updating=True)
    request = NewRequest(RequestKind.TRUNCATE_STREAM, SC, ST, 7)
    assert await store.start_truncation(SC, ST, new, before.version, request, FENCE) is RetentionWrite.WRITTEN

    after = await services.stream_store.get_truncation(SC, ST)
    assert after.value == new and after.version == before.version + 1
    pending = await services.requests.pending(Processor.REQUESTS, REQUEST_BUCKETS, [], 10)
    assert [(r.kind, r.scope, r.stream) for r in pending] == [(RequestKind.TRUNCATE_STREAM, SC, ST)]


async def test_start_truncation_at_a_stale_version_conflicts_and_posts_nothing(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await own(services)
    before = await services.stream_store.get_truncation(SC, ST)
    await services.stream_store.set_truncation(SC, ST, TruncationRecord(size_till=1), before.version)
    new = TruncationRecord(stream_cut={0: 1, 1: 2}, span={0: 0, 1: 0}, size_till=3, updating=True)
    request = NewRequest(RequestKind.TRUNCATE_STREAM, SC, ST, 7)
    with pytest.raises(WriteConflict):
        await store.start_truncation(SC, ST, new, before.version, request, FENCE)
    assert (await services.stream_store.get_truncation(SC, ST)).value == TruncationRecord(size_till=1)
    assert await services.requests.pending(Processor.REQUESTS, REQUEST_BUCKETS, [], 10) == []


# --- membership --------------------------------------------------------------------------------------


async def test_members_are_the_retained_streams_of_the_asked_buckets(
    services: Services, store: PgRetentionStore
) -> None:
    await own(services)
    names = [f"r{i}" for i in range(12)]
    for name in names:
        await make_stream(services, name)
    await make_stream(services, "plain", retention=None)
    await make_stream(services, "sealed")
    # The seal workflow needs the request workers, which do not run here: seal it directly.
    state = await services.stream_store.get_state(SC, "sealed")
    await services.stream_store.set_state(SC, "sealed", StreamState.SEALED, state.version)
    await services.scopes.create_scope("_system")
    await services.streams.create_stream(
        "_system", "internal", StreamConfig(ScalingPolicy.fixed(1), SIZE_POLICY)
    )
    await store.add_record(SC, "r0", record(42), FENCE)

    everything = await store.list_members([0, 1, 2], 3)
    assert sorted(m.name for m in everything) == sorted(names)
    for member in everything:
        assert member.bucket == stream_bucket(SC, member.name, 3)
        assert member.scope == SC
        assert member.latest_recording_time == (42 if member.name == "r0" else None)
    some = await store.list_members([1], 3)
    assert {m.name for m in some} == {n for n in names if stream_bucket(SC, n, 3) == 1}
    assert await store.list_members([], 3) == []


async def test_a_removed_policy_leaves_the_bucket(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    config = await services.stream_store.get_config(SC, ST)
    await services.stream_store.set_config(
        SC, ST, StreamConfig(ScalingPolicy.fixed(2)), False, config.version
    )
    assert await store.list_members([0], 1) == []


# --- subscribers ---------------------------------------------------------------------------------


async def test_subscriber_records_round_trip(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    first = SubscriberRecord(f"{SC}/b", RG, 3, {0: 5, 1: 6}, 100)
    assert await store.insert_subscriber(SC, ST, first)
    assert not await store.insert_subscriber(SC, ST, SubscriberRecord(f"{SC}/b", uuid.uuid4(), 9))
    await store.insert_subscriber(SC, ST, SubscriberRecord(f"{SC}/a", RG, 0))

    found = await store.get_subscriber(SC, ST, f"{SC}/b")
    assert found is not None and found.value == first and found.version == 0
    assert await store.get_subscriber(SC, ST, f"{SC}/none") is None
    assert [s.value.subscriber for s in await store.list_subscribers(SC, ST)] == [f"{SC}/a", f"{SC}/b"]
    assert (await store.get_context(SC, ST)).subscriber_cuts == ({}, {0: 5, 1: 6})

    moved = SubscriberRecord(f"{SC}/b", RG, 3, {0: 7, 1: 7}, 200)
    assert await store.set_subscriber(SC, ST, moved, 0) == 1
    with pytest.raises(WriteConflict):
        await store.set_subscriber(SC, ST, moved, 0)
    with pytest.raises(NotFound):
        await store.set_subscriber(SC, ST, SubscriberRecord(f"{SC}/none", RG, 0), 0)

    with pytest.raises(WriteConflict):
        await store.delete_subscriber(SC, ST, f"{SC}/b", 0)
    assert await store.delete_subscriber(SC, ST, f"{SC}/b", 1)
    assert not await store.delete_subscriber(SC, ST, f"{SC}/b", 1)
    assert [s.value.subscriber for s in await store.list_subscribers(SC, ST)] == [f"{SC}/a"]


async def test_a_stream_without_subscribers_lists_none(services: Services, store: PgRetentionStore) -> None:
    await make_stream(services)
    assert await store.list_subscribers(SC, ST) == []


async def test_two_writers_of_one_subscriber_exactly_one_wins(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await store.insert_subscriber(SC, ST, SubscriberRecord(f"{SC}/rg", RG, 0))
    cuts = ({0: 10, 1: 10}, {0: 20, 1: 5})

    def writer(i: int):  # type: ignore[no-untyped-def]
        return lambda: store.set_subscriber(SC, ST, SubscriberRecord(f"{SC}/rg", RG, 0, cuts[i], i), 0)

    results = await race(services, "stream_subscribers", [writer(0), writer(1)])
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    assert results[winners[0]] == 1
    stored = await store.get_subscriber(SC, ST, f"{SC}/rg")
    assert stored is not None
    assert (stored.value.truncation_stream_cut, stored.version) == (cuts[winners[0]], 1)


async def test_a_delete_racing_an_update_exactly_one_wins(
    services: Services, store: PgRetentionStore
) -> None:
    await make_stream(services)
    await store.insert_subscriber(SC, ST, SubscriberRecord(f"{SC}/rg", RG, 0))

    async def update() -> int:
        return await store.set_subscriber(SC, ST, SubscriberRecord(f"{SC}/rg", RG, 0, {0: 1, 1: 1}, 1), 0)

    async def delete() -> int:
        return int(await store.delete_subscriber(SC, ST, f"{SC}/rg", 0))

    results = await race(services, "stream_subscribers", [update, delete])
    assert sum(isinstance(r, int) for r in results) == 1, results
    assert sum(isinstance(r, WriteConflict | NotFound) for r in results) == 1, results
    stored = await store.get_subscriber(SC, ST, f"{SC}/rg")
    if isinstance(results[0], int):
        assert stored is not None and stored.value.truncation_stream_cut == {0: 1, 1: 1}
    else:
        assert stored is None
