"""The reader-group store against a real PostgreSQL: the outbox insert (group and request in
one transaction, only in an ACTIVE scope), the configuration round trip, conditional writes
naming the incarnation, listing and counting, the scope's foreign key, and forced two-writer
races for `reader_groups` (registered as covered here in tests/store/test_versioned_races.py)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest

from app.domain.errors import NotFound, WriteConflict
from app.domain.readergroups import (
    ReaderGroupConfig,
    ReaderGroupRecord,
    ReaderGroupState,
    ScopedStream,
    StreamDataRetention,
)
from app.domain.records import ScopeState
from app.domain.requests import NewRequest, Processor, RequestKind
from app.services.scopes import ScopeOutcome
from app.store.readergroups import PgReaderGroupStore
from app.testing.controller import Services, idle_controller
from tests.store.test_versioned_races import race

SC = "rgsc"
T0 = 1_700_000_000_000
CONFIG = ReaderGroupConfig(
    starting_stream_cuts={ScopedStream(SC, "b"): {0: 5, 1: 7}, ScopedStream("other", "a"): {}},
    ending_stream_cuts={ScopedStream(SC, "b"): {0: 50, 1: -1}},
    group_refresh_time_ms=1_000,
    automatic_checkpoint_interval_ms=-1,
    max_outstanding_checkpoint_request=9,
    retention=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
)


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with idle_controller(db_url, SC) as running:
        yield running


@pytest.fixture
def store(services: Services) -> PgReaderGroupStore:
    return PgReaderGroupStore(services.pool)


def proposal(name: str = "rg", scope: str = SC, config: ReaderGroupConfig = CONFIG) -> ReaderGroupRecord:
    return ReaderGroupRecord(scope, name, uuid.uuid4(), 0, ReaderGroupState.CREATING, config, False, T0)


def create_request(record: ReaderGroupRecord) -> NewRequest:
    return NewRequest(
        RequestKind.CREATE_READER_GROUP,
        record.scope,
        record.state_stream,
        T0,
        payload={"name": record.name, "id": str(record.id)},
    )


async def create(store: PgReaderGroupStore, record: ReaderGroupRecord) -> ReaderGroupRecord:
    creation = await store.create_reader_group(record, create_request(record))
    assert creation.created
    return creation.record.value


async def request_rows(services: Services) -> list[tuple[str, str, str, dict[str, str], bool]]:
    rows = await services.pool.fetch(
        "SELECT kind, scope, stream, payload, bucket = pgc_request_bucket(scope, stream) AS bucketed "
        "FROM requests ORDER BY id"
    )
    return [(r["kind"], r["scope"], r["stream"], r["payload"], r["bucketed"]) for r in rows]


# --- create ---------------------------------------------------------------------------------------


async def test_create_records_the_group_and_its_request_together(
    services: Services, store: PgReaderGroupStore
) -> None:
    proposed = proposal()
    creation = await store.create_reader_group(proposed, create_request(proposed))

    assert creation.created and creation.record.version == 0
    assert creation.record.value == proposed
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value == proposed  # the configuration round-trips, order kept
    assert list(stored.value.config.starting_stream_cuts) == [
        ScopedStream(SC, "b"),
        ScopedStream("other", "a"),
    ]
    [(kind, scope, stream, payload, bucketed)] = await request_rows(services)
    assert (kind, scope, stream, payload) == (
        "create_reader_group",
        SC,
        "_RGrg",
        {"name": "rg", "id": str(proposed.id)},
    )
    assert bucketed
    queued = await services.requests.pending(Processor.REQUESTS, list(range(1024)), [], 10)
    assert [r.kind for r in queued] == [RequestKind.CREATE_READER_GROUP]


async def test_create_of_a_taken_name_returns_the_group_and_queues_nothing(
    services: Services, store: PgReaderGroupStore
) -> None:
    first = await create(store, proposal())
    second = proposal(config=dataclasses.replace(CONFIG, retention=StreamDataRetention.NONE))
    creation = await store.create_reader_group(second, create_request(second))
    assert not creation.created
    assert creation.record.value == first
    assert len(await request_rows(services)) == 1


async def test_create_in_a_missing_or_deleting_scope_writes_nothing(
    services: Services, store: PgReaderGroupStore
) -> None:
    with pytest.raises(NotFound):
        await store.create_reader_group(proposal(scope="nosuch"), create_request(proposal(scope="nosuch")))
    current = await services.scope_store.get_scope(SC)
    await services.scope_store.set_scope_state(SC, ScopeState.DELETING, current.version)
    with pytest.raises(NotFound):
        await store.create_reader_group(proposal(), create_request(proposal()))
    assert await store.get_reader_group(SC, "rg") is None
    assert await request_rows(services) == []


async def test_two_creates_of_one_name_insert_once(services: Services, store: PgReaderGroupStore) -> None:
    proposals = [proposal(), proposal()]
    results = await race(
        services,
        "reader_groups",
        [lambda: _created(store, proposals[0]), lambda: _created(store, proposals[1])],
    )
    assert results.count(True) == 1 and results.count(False) == 1, results
    winner = proposals[results.index(True)]
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.id == winner.id
    assert len(await request_rows(services)) == 1


async def _created(store: PgReaderGroupStore, record: ReaderGroupRecord) -> int:
    creation = await store.create_reader_group(record, create_request(record))
    return creation.created


# --- conditional writes ---------------------------------------------------------------------------


async def test_update_is_conditional_on_version_and_id(services: Services, store: PgReaderGroupStore) -> None:
    group = await create(store, proposal())
    request = NewRequest(RequestKind.UPDATE_READER_GROUP, SC, "_RGrg", T0, payload={"name": "rg"})
    updated = dataclasses.replace(group, generation=1, updating=True)
    assert await store.update_reader_group(updated, 0, request=request) == 1
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value == updated and stored.version == 1
    assert [row[0] for row in await request_rows(services)] == ["create_reader_group", "update_reader_group"]

    with pytest.raises(WriteConflict):  # stale version: nothing written, no request queued
        await store.update_reader_group(dataclasses.replace(updated, generation=7), 0, request=request)
    with pytest.raises(NotFound):  # another incarnation's id
        await store.update_reader_group(dataclasses.replace(updated, id=uuid.uuid4()), 1)
    with pytest.raises(NotFound):
        await store.update_reader_group(dataclasses.replace(updated, name="nosuch"), 1)
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.generation == 1 and stored.version == 1
    assert len(await request_rows(services)) == 2


async def test_delete_is_conditional_on_version_and_id(store: PgReaderGroupStore) -> None:
    group = await create(store, proposal())
    await store.update_reader_group(dataclasses.replace(group, state=ReaderGroupState.DELETING), 0)
    with pytest.raises(WriteConflict):
        await store.delete_reader_group(SC, "rg", group.id, 0)
    with pytest.raises(NotFound):
        await store.delete_reader_group(SC, "rg", uuid.uuid4(), 1)
    await store.delete_reader_group(SC, "rg", group.id, 1)
    assert await store.get_reader_group(SC, "rg") is None
    with pytest.raises(NotFound):
        await store.delete_reader_group(SC, "rg", group.id, 1)


async def test_a_re_created_group_is_not_touched_by_writes_for_the_old_one(store: PgReaderGroupStore) -> None:
    old = await create(store, proposal())
    await store.delete_reader_group(SC, "rg", old.id, 0)
    new = await create(store, proposal())
    # Both incarnations are at version 0: only the id tells them apart.
    with pytest.raises(NotFound):
        await store.delete_reader_group(SC, "rg", old.id, 0)
    with pytest.raises(NotFound):
        await store.update_reader_group(dataclasses.replace(old, state=ReaderGroupState.ACTIVE), 0)
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value == new


# --- listing, counting, the scope ---------------------------------------------------------------


async def test_list_and_count(services: Services, store: PgReaderGroupStore) -> None:
    assert await store.list_reader_groups(SC) == []
    assert await store.count_reader_groups(SC) == 0
    for name in ("zeta", "alpha", "mid"):
        await create(store, proposal(name))
    assert await store.list_reader_groups(SC) == ["alpha", "mid", "zeta"]
    assert await store.count_reader_groups(SC) == 3
    with pytest.raises(NotFound):
        await store.list_reader_groups("nosuch")
    assert await store.count_reader_groups("nosuch") == 0


async def test_a_scope_with_a_reader_group_cannot_be_deleted(
    services: Services, store: PgReaderGroupStore
) -> None:
    group = await create(store, proposal())
    assert await services.scopes.delete_scope(SC) is ScopeOutcome.NOT_EMPTY
    await store.delete_reader_group(SC, "rg", group.id, 0)
    assert await services.scopes.delete_scope(SC) is ScopeOutcome.SUCCESS


# --- forced races (the harness of tests/store/test_versioned_races.py) ------------------------------


async def test_two_updates_of_one_version_exactly_one_wins(
    services: Services, store: PgReaderGroupStore
) -> None:
    group = await create(store, proposal())
    variants = [
        dataclasses.replace(group, generation=1, updating=True),
        dataclasses.replace(group, generation=2),
    ]
    results = await race(
        services,
        "reader_groups",
        [
            lambda: store.update_reader_group(variants[0], 0),
            lambda: store.update_reader_group(variants[1], 0),
        ],
    )
    winners = [i for i, r in enumerate(results) if r == 1]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and stored.version == 1 and stored.value == variants[winners[0]]


async def test_an_update_and_a_delete_of_one_version_exactly_one_wins(
    services: Services, store: PgReaderGroupStore
) -> None:
    group = await create(store, proposal())
    deleting = dataclasses.replace(group, state=ReaderGroupState.DELETING)

    async def delete() -> int:
        await store.delete_reader_group(SC, "rg", group.id, 0)
        return -1

    results = await race(services, "reader_groups", [lambda: store.update_reader_group(deleting, 0), delete])
    assert sum(isinstance(r, int) for r in results) == 1, results
    assert sum(isinstance(r, WriteConflict | NotFound) for r in results) == 1, results
    stored = await store.get_reader_group(SC, "rg")
    if results[0] == 1:
        assert stored is not None and stored.value == deleting and stored.version == 1
    else:
        assert stored is None


async def test_a_stale_write_after_a_successful_one_conflicts(store: PgReaderGroupStore) -> None:
    group = await create(store, proposal())
    first = dataclasses.replace(group, generation=1)
    assert await store.update_reader_group(first, 0) == 1
    with pytest.raises(WriteConflict):
        await store.update_reader_group(dataclasses.replace(group, generation=5), 0)
    assert await store.update_reader_group(dataclasses.replace(group, generation=5), 1) == 2
    stored = await store.get_reader_group(SC, "rg")
    assert stored is not None and (stored.value.generation, stored.version) == (5, 2)
