"""The auto-scale store against a real PostgreSQL: the report intake's checks and its request row,
and the versioned cold markers (forced two-writer races, as tests/store/test_versioned_races.py
does for every other versioned table; it lists segment_cold_markers as covered here)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.domain.autoscale import ScaleReport
from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import segment_id as seg
from app.domain.records import ScaleType, ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import NewRequest, Processor, RequestKind
from app.store.autoscale import PgAutoScaleStore
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from tests.store.test_versioned_races import race
from workers.handlers import stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner

SC, ST = "asc", "s"
T0 = 1_700_000_000_000


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as running:
        await running.scopes.create_scope(SC)
        policy = ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, 2, 3)
        await running.streams.create_stream(SC, ST, StreamConfig(policy))
        yield running


@pytest.fixture
def store(services: Services) -> PgAutoScaleStore:
    return PgAutoScaleStore(services.pool)


def auto_scale(segment: int, stream: str = ST) -> NewRequest:
    payload = ScaleReport.build(segment, "UP", T0, 2, False).to_payload()
    return NewRequest(RequestKind.AUTO_SCALE, SC, stream, T0, payload=payload)


# --- the intake -----------------------------------------------------------------------------


async def test_a_report_becomes_an_auto_scale_request_of_its_stream(
    services: Services, store: PgAutoScaleStore
) -> None:
    request_id = await store.enqueue_report(auto_scale(1), 1)
    queued = await services.requests.get(request_id)
    assert queued is not None
    assert (queued.kind, queued.processor, queued.scope, queued.stream) == (
        RequestKind.AUTO_SCALE,
        Processor.REQUESTS,
        SC,
        ST,
    )
    assert ScaleReport.from_payload(queued.payload) == ScaleReport.build(1, "UP", T0, 2, False)
    assert not queued.started and queued.attempts == 0


async def test_unknown_stream_or_segment_is_not_found_and_queues_nothing(
    services: Services, store: PgAutoScaleStore
) -> None:
    with pytest.raises(NotFound, match="stream asc/missing not found"):
        await store.enqueue_report(auto_scale(0, "missing"), 0)
    with pytest.raises(NotFound, match="segment 3 of stream asc/s not found"):
        await store.enqueue_report(auto_scale(3), 3)
    with pytest.raises(NotFound, match="segment 4294967296 of stream asc/s"):
        await store.check_segment(SC, ST, seg(0, 1))  # right number, wrong epoch
    await store.check_segment(SC, ST, 2)
    assert await services.requests.list_requests(0, 10) == []


async def test_a_sealed_segment_still_belongs_to_its_stream(
    services: Services, store: PgAutoScaleStore
) -> None:
    # The controller, not the intake, decides that a report on a sealed segment does nothing.
    outcome = await services.lifecycle.scaling.scale(SC, ST, [0], [(0.0, 1 / 6), (1 / 6, 1 / 3)], T0)
    assert outcome.status.value == "STARTED"
    deps = WorkflowDeps(
        services.stream_store,
        services.scope_store,
        services.segment_store,
        services.clock,
        services.txn_store,
    )
    runner = RequestRunner(
        services.requests,
        stream_request_handlers(deps),
        services.clock,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
    for request in await services.requests.list_requests(0, 10):
        assert await runner.attempt(request) is None
    _state, active = await services.stream_store.get_active_epoch(SC, ST)
    assert not active.contains(0) and active.contains(seg(3, 1))
    await store.check_segment(SC, ST, 0)
    await store.check_segment(SC, ST, seg(3, 1))


# --- cold markers ---------------------------------------------------------------------------


async def test_markers_are_created_rewritten_at_their_version_and_read_back(store: PgAutoScaleStore) -> None:
    assert await store.cold_markers(SC, ST) == {}
    assert await store.put_cold_marker(SC, ST, 1, T0, None) == 0
    assert await store.put_cold_marker(SC, ST, 2, 2**63 - 1, None) == 0
    assert await store.put_cold_marker(SC, ST, 1, T0 + 5, 0) == 1
    markers = await store.cold_markers(SC, ST)
    assert {s: (v.value, v.version) for s, v in markers.items()} == {1: (T0 + 5, 1), 2: (2**63 - 1, 0)}
    assert await store.cold_markers(SC, "missing") == {}


async def test_a_second_insert_or_a_stale_rewrite_conflicts(store: PgAutoScaleStore) -> None:
    await store.put_cold_marker(SC, ST, 1, T0, None)
    with pytest.raises(WriteConflict):
        await store.put_cold_marker(SC, ST, 1, T0 + 1, None)
    with pytest.raises(WriteConflict):
        await store.put_cold_marker(SC, ST, 1, T0 + 1, 7)
    with pytest.raises(WriteConflict):
        await store.put_cold_marker(SC, ST, 5, T0 + 1, 0)  # no such marker to rewrite
    assert (await store.cold_markers(SC, ST))[1].value == T0


async def test_markers_of_a_missing_stream_are_not_found(store: PgAutoScaleStore) -> None:
    with pytest.raises(NotFound):
        await store.put_cold_marker(SC, "missing", 1, T0, None)
    with pytest.raises(NotFound):
        await store.put_cold_marker(SC, "missing", 1, T0, 0)


async def test_deleting_markers_is_all_or_nothing_at_the_versions_read(store: PgAutoScaleStore) -> None:
    for segment in (0, 1, 2):
        await store.put_cold_marker(SC, ST, segment, T0, None)
    await store.put_cold_marker(SC, ST, 1, T0 + 1, 0)  # now at version 1

    with pytest.raises(WriteConflict):
        await store.delete_cold_markers(SC, ST, {0: 0, 1: 0})
    assert sorted(await store.cold_markers(SC, ST)) == [0, 1, 2]

    await store.delete_cold_markers(SC, ST, {0: 0, 1: 1})
    assert sorted(await store.cold_markers(SC, ST)) == [2]
    await store.delete_cold_markers(SC, ST, {})
    with pytest.raises(WriteConflict):
        await store.delete_cold_markers(SC, ST, {0: 0})  # gone already


async def test_markers_go_with_their_stream(services: Services, store: PgAutoScaleStore) -> None:
    await store.put_cold_marker(SC, ST, 1, T0, None)
    await services.stream_store.set_state(
        SC, ST, StreamState.SEALED, (await services.stream_store.get_state(SC, ST)).version
    )
    assert await services.stream_store.delete_stream(SC, ST)
    count = await services.pool.fetchval("SELECT count(*) FROM segment_cold_markers")
    assert count == 0


# --- forced races, as in test_versioned_races --------------------------------------------------


@pytest.mark.parametrize("existing", [False, True], ids=["insert", "update"])
async def test_two_marker_writers_exactly_one_wins(
    services: Services, store: PgAutoScaleStore, existing: bool
) -> None:
    version = None
    if existing:
        version = await store.put_cold_marker(SC, ST, 1, T0, None)
    untils = (T0 + 100, T0 + 200)
    results = await race(
        services,
        "segment_cold_markers",
        [
            lambda: store.put_cold_marker(SC, ST, 1, untils[0], version),
            lambda: store.put_cold_marker(SC, ST, 1, untils[1], version),
        ],
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    expected_version = 0 if version is None else version + 1
    assert results[winners[0]] == expected_version
    stored = (await store.cold_markers(SC, ST))[1]
    assert (stored.value, stored.version) == (untils[winners[0]], expected_version)


async def test_a_delete_racing_a_rewrite_leaves_the_rewrite(
    services: Services, store: PgAutoScaleStore
) -> None:
    version = await store.put_cold_marker(SC, ST, 1, T0, None)
    results = await race(
        services,
        "segment_cold_markers",
        [
            lambda: store.put_cold_marker(SC, ST, 1, T0 + 1, version),
            lambda: store.delete_cold_markers(SC, ST, {1: version}),
        ],
    )
    conflicts = [r for r in results if isinstance(r, WriteConflict)]
    assert len(conflicts) == 1, results
    markers = await store.cold_markers(SC, ST)
    if isinstance(results[0], WriteConflict):
        assert markers == {}  # the delete won
    else:
        assert markers[1].value == T0 + 1 and markers[1].version == version + 1
