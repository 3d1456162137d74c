"""The cluster's versioned tables: two writers that read the same version race, exactly one
wins, and the row holds the winner's write. Uses the forced race of test_versioned_races."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.domain.cluster import BucketCounts, BucketService, Member
from app.domain.errors import IllegalState, WriteConflict
from app.testing.controller import Services, running_controller
from tests.store.test_versioned_races import race


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as running:
        yield running


def one_winner(results: list[object], loser: type[BaseException] = WriteConflict) -> int:
    winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    losers = [i for i, r in enumerate(results) if isinstance(r, loser)]
    assert len(winners) == 1 and len(losers) == 1, results
    return winners[0]


async def test_cluster_settings(services: Services) -> None:
    store = services.cluster_store
    before = await store.get_settings()
    wanted = [BucketCounts(8, 1, 100), BucketCounts(32, 1, 100)]
    results = await race(
        services,
        "cluster_settings",
        [lambda: _configure(services, wanted[0]), lambda: _configure(services, wanted[1])],
    )
    winner = one_winner(results)
    after = await store.get_settings()
    assert after.counts == wanted[winner] and after.version == before.version + 1


async def _configure(services: Services, counts: BucketCounts) -> int:
    return (await services.cluster_store.configure_settings(counts, 4)).version


async def test_cluster_settings_refuse_a_change_once_a_stream_exists(services: Services) -> None:
    from app.domain.records import ScalingPolicy, StreamConfig

    await services.scopes.create_scope("sc")
    await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    with pytest.raises(IllegalState):
        await services.cluster_store.configure_settings(BucketCounts(8, 1, 100), 4)


async def test_controllers_heartbeat(services: Services) -> None:
    store = services.cluster_store
    version = await store.register_member(Member("m", "h", 1, 2, 0, 0))

    async def beat(at: int) -> int:
        written = await store.heartbeat("m", at, version)
        if written is None:
            raise WriteConflict("heartbeat lost")
        return written

    results = await race(services, "controllers", [lambda: beat(100), lambda: beat(200)])
    winner = one_winner(results)
    members = await store.members(0, 10**12)
    assert [(m.heartbeat_at, v) for m, _, v in members] == [((100, 200)[winner], version + 1)]


async def test_cluster_leader(services: Services) -> None:
    store = services.cluster_store
    first = await store.set_leader("a", 1, None)
    results = await race(
        services,
        "cluster_leader",
        [lambda: _lead(services, "b", first.version), lambda: _lead(services, "c", first.version)],
    )
    winner = one_winner(results)
    leader = await store.get_leader()
    assert leader is not None and leader.controller_id == ("b", "c")[winner] and leader.term == 2


async def _lead(services: Services, member: str, version: int) -> int:
    return (await services.cluster_store.set_leader(member, 2, version)).version


async def test_bucket_owners_claim(services: Services) -> None:
    store = services.cluster_store
    await store.ensure_buckets(BucketService.RETENTION, 1)
    (row,) = await store.bucket_rows(BucketService.RETENTION)

    async def claim(owner: str) -> int:
        return (await store.claim_bucket(row, owner, 5)).generation

    results = await race(services, "bucket_owners", [lambda: claim("a"), lambda: claim("b")])
    winner = one_winner(results)
    (after,) = await store.bucket_rows(BucketService.RETENTION)
    assert after.owner == ("a", "b")[winner] and after.generation == row.generation + 1
    assert after.version == row.version + 1


async def test_bucket_owners_assignment(services: Services) -> None:
    store = services.cluster_store
    await store.ensure_buckets(BucketService.RETENTION, 1)
    (row,) = await store.bucket_rows(BucketService.RETENTION)

    async def assign(member: str) -> int:
        if await store.assign_buckets(BucketService.RETENTION, [(row, member)]) != 1:
            raise WriteConflict("assignment lost")
        return row.version + 1

    results = await race(services, "bucket_owners", [lambda: assign("a"), lambda: assign("b")])
    winner = one_winner(results)
    (after,) = await store.bucket_rows(BucketService.RETENTION)
    assert after.assigned_to == ("a", "b")[winner] and after.version == row.version + 1
