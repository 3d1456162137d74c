"""The key-value table store against a real PostgreSQL: the outbox insert, the safe starting
number, conditional writes naming the incarnation, listing and counting, and forced two-writer
races for its versioned tables (kvtables, deleted_kvtables), as tests/store/test_versioned_races.py
does for the others (it lists both tables as covered here)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from app.domain.errors import NotEmpty, NotFound, WriteConflict
from app.domain.kvtables import KvtConfig, KvtRecord, KvtState
from app.domain.records import ScopeState
from app.domain.requests import Processor, RequestKind
from app.services.kvtables import create_request, delete_request
from app.store.kvtables import PgKvtStore
from app.testing.controller import Services, idle_controller
from tests.store.test_versioned_races import race

SC = "kvsc"
T0 = 1_700_000_000_000
CONFIG = KvtConfig(partition_count=3, primary_key_length=8, secondary_key_length=4, rollover_size_bytes=1024)


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with idle_controller(db_url, SC) as running:
        yield running


@pytest.fixture
def store(services: Services) -> PgKvtStore:
    return PgKvtStore(services.pool)


def proposal(name: str = "t", scope: str = SC, config: KvtConfig = CONFIG, at: int = T0) -> KvtRecord:
    return KvtRecord(scope, name, str(uuid.uuid4()), config, KvtState.CREATING, at, 0)


async def create(store: PgKvtStore, record: KvtRecord) -> KvtRecord:
    creation = await store.create_kvt(record, create_request(record, record.creation_time))
    assert creation.created
    return creation.record.value


async def request_rows(services: Services) -> list[tuple[str, str, str, dict[str, str], int, int]]:
    rows = await services.pool.fetch(
        "SELECT kind, scope, stream, payload, bucket, pgc_request_bucket(scope, stream) AS expected "
        "FROM requests ORDER BY id"
    )
    return [(r["kind"], r["scope"], r["stream"], r["payload"], r["bucket"], r["expected"]) for r in rows]


# --- create ---------------------------------------------------------------------------------------


async def test_create_records_the_table_and_its_request_together(
    services: Services, store: PgKvtStore
) -> None:
    proposed = proposal()
    creation = await store.create_kvt(proposed, create_request(proposed, T0))

    assert creation.created
    assert creation.record.version == 0
    assert creation.record.value == proposed  # CREATING, start number 0, the proposed id
    [(kind, scope, stream, payload, bucket, expected)] = await request_rows(services)
    assert (kind, scope, stream, payload) == ("create_kvt", SC, "t_kvtable", {"kvt": "t", "id": proposed.id})
    assert bucket == expected
    queued = await services.requests.pending(Processor.REQUESTS, [bucket], [], 10)
    assert [r.kind for r in queued] == [RequestKind.CREATE_KVT]


async def test_create_of_a_taken_name_returns_the_table_and_queues_nothing(
    services: Services, store: PgKvtStore
) -> None:
    first = await create(store, proposal())
    second = proposal(config=KvtConfig(9, 1), at=T0 + 5)
    creation = await store.create_kvt(second, create_request(second, T0 + 5))

    assert not creation.created
    assert creation.record.value == first
    assert len(await request_rows(services)) == 1


@pytest.mark.parametrize("scope_state", ["missing", "deleting"])
async def test_create_in_a_missing_or_deleting_scope_is_not_found_and_writes_nothing(
    services: Services, store: PgKvtStore, scope_state: str
) -> None:
    scope = "gone"
    if scope_state == "deleting":
        await services.scopes.create_scope(scope)
        version = (await services.scope_store.get_scope(scope)).version
        await services.scope_store.set_scope_state(scope, ScopeState.DELETING, version)
    proposed = proposal(scope=scope)
    with pytest.raises(NotFound):
        await store.create_kvt(proposed, create_request(proposed, T0))
    assert await services.pool.fetchval("SELECT count(*) FROM kvtables") == 0
    assert await request_rows(services) == []


async def test_the_starting_number_follows_the_last_deleted_table_of_the_name(store: PgKvtStore) -> None:
    await store.put_deleted_kvt(SC, "t", 6, None)
    record = await create(store, proposal())
    assert record.start_number == 7
    assert [s.number for s in record.segments] == [7, 8, 9]
    other = await create(store, proposal(name="u"))
    assert other.start_number == 0  # the record is per name
    assert await store.get_deleted_kvt("kvsc2", "t") is None  # and per scope


async def test_get_of_a_missing_table_is_not_found(store: PgKvtStore) -> None:
    with pytest.raises(NotFound):
        await store.get_kvt(SC, "nope")


# --- state and deletion, conditional on incarnation and version -----------------------------------


async def test_set_state_is_conditional_and_queues_its_request_in_the_same_transaction(
    services: Services, store: PgKvtStore
) -> None:
    record = await create(store, proposal())
    version = await store.set_kvt_state(
        SC, "t", record.id, KvtState.DELETING, 0, request=delete_request(record, T0 + 1)
    )
    assert version == 1
    assert (await store.get_kvt(SC, "t")).value.state == KvtState.DELETING
    assert [row[0] for row in await request_rows(services)] == ["create_kvt", "delete_kvt"]

    # A stale version conflicts and its request is rolled back with it.
    with pytest.raises(WriteConflict):
        await store.set_kvt_state(SC, "t", record.id, KvtState.ACTIVE, 0, request=delete_request(record, 9))
    assert len(await request_rows(services)) == 2
    assert (await store.get_kvt(SC, "t")).value.state == KvtState.DELETING


async def test_writes_naming_another_incarnation_are_not_found(store: PgKvtStore) -> None:
    await create(store, proposal())
    stranger = str(uuid.uuid4())
    with pytest.raises(NotFound):
        await store.set_kvt_state(SC, "t", stranger, KvtState.ACTIVE, 0)
    with pytest.raises(NotFound):
        await store.set_kvt_state(SC, "missing", stranger, KvtState.ACTIVE, 0)
    assert await store.delete_kvt(SC, "t", stranger, 0) is False
    assert (await store.get_kvt(SC, "t")).value.state == KvtState.CREATING


async def test_delete_is_conditional_on_the_version(store: PgKvtStore) -> None:
    record = await create(store, proposal())
    await store.set_kvt_state(SC, "t", record.id, KvtState.DELETING, 0)
    with pytest.raises(WriteConflict):
        await store.delete_kvt(SC, "t", record.id, 0)
    assert await store.delete_kvt(SC, "t", record.id, 1) is True
    with pytest.raises(NotFound):
        await store.get_kvt(SC, "t")
    assert await store.delete_kvt(SC, "t", record.id, 1) is False  # gone already


async def test_a_scope_holding_a_table_is_not_removed(services: Services, store: PgKvtStore) -> None:
    await create(store, proposal())
    # The foreign key refuses it even before deleteScope counts tables (the lead's change).
    with pytest.raises(NotEmpty):
        await services.scope_store.delete_scope(SC)
    assert (await services.scope_store.get_scope(SC)).value == ScopeState.ACTIVE


# --- listing and counting -----------------------------------------------------------------------


async def test_list_pages_by_name_in_every_state_and_count_agrees(store: PgKvtStore) -> None:
    names = ["b", "a", "d", "c"]
    records = {n: await create(store, proposal(name=n)) for n in names}
    await store.set_kvt_state(SC, "b", records["b"].id, KvtState.ACTIVE, 0)
    await store.set_kvt_state(SC, "c", records["c"].id, KvtState.DELETING, 0)

    assert await store.list_kvts(SC, "", 2) == ["a", "b"]
    assert await store.list_kvts(SC, "b", 2) == ["c", "d"]
    assert await store.list_kvts(SC, "d", 2) == []
    assert await store.count_kvts(SC) == 4
    assert await store.count_kvts("elsewhere") == 0


async def test_list_of_a_missing_scope_is_not_found(store: PgKvtStore) -> None:
    with pytest.raises(NotFound):
        await store.list_kvts("nope", "", 10)


# --- forced races ------------------------------------------------------------------------------------


async def test_two_state_writers_exactly_one_wins(services: Services, store: PgKvtStore) -> None:
    record = await create(store, proposal())
    targets = (KvtState.ACTIVE, KvtState.DELETING)
    results = await race(
        services,
        "kvtables",
        [
            lambda: store.set_kvt_state(SC, "t", record.id, targets[0], 0),
            lambda: store.set_kvt_state(
                SC, "t", record.id, targets[1], 0, request=delete_request(record, T0 + 1)
            ),
        ],
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    assert results[winners[0]] == 1
    stored = await store.get_kvt(SC, "t")
    assert (stored.value.state, stored.version) == (targets[winners[0]], 1)
    # The DELETING writer's request exists exactly when it won.
    kinds = [row[0] for row in await request_rows(services)]
    assert kinds == (["create_kvt", "delete_kvt"] if winners == [1] else ["create_kvt"])


async def test_a_delete_racing_a_state_write_leaves_one_outcome(
    services: Services, store: PgKvtStore
) -> None:
    record = await create(store, proposal())
    await store.set_kvt_state(SC, "t", record.id, KvtState.DELETING, 0)
    results = await race(
        services,
        "kvtables",
        [
            lambda: store.delete_kvt(SC, "t", record.id, 1),
            lambda: store.set_kvt_state(SC, "t", record.id, KvtState.DELETING, 1),
        ],
    )
    if results[0] is True:
        # The delete won; the state write then finds the incarnation gone.
        assert isinstance(results[1], NotFound), results
        with pytest.raises(NotFound):
            await store.get_kvt(SC, "t")
    else:
        assert isinstance(results[0], WriteConflict) and results[1] == 2, results
        assert (await store.get_kvt(SC, "t")).version == 2


@pytest.mark.parametrize("existing", [False, True], ids=["insert", "update"])
async def test_two_deleted_record_writers_exactly_one_wins(
    services: Services, store: PgKvtStore, existing: bool
) -> None:
    version = await store.put_deleted_kvt(SC, "t", 1, None) if existing else None
    values = (10, 20)
    results = await race(
        services,
        "deleted_kvtables",
        [
            lambda: store.put_deleted_kvt(SC, "t", values[0], version),
            lambda: store.put_deleted_kvt(SC, "t", values[1], version),
        ],
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, results
    expected_version = 0 if version is None else version + 1
    assert results[winners[0]] == expected_version
    stored = await store.get_deleted_kvt(SC, "t")
    assert stored is not None and (stored.value, stored.version) == (values[winners[0]], expected_version)


async def test_a_stale_deleted_record_write_conflicts(store: PgKvtStore) -> None:
    first = await store.put_deleted_kvt(SC, "t", 3, None)
    with pytest.raises(WriteConflict):
        await store.put_deleted_kvt(SC, "t", 4, None)
    assert await store.put_deleted_kvt(SC, "t", 5, first) == first + 1
    with pytest.raises(WriteConflict):
        await store.put_deleted_kvt(SC, "t", 6, first)
    stored = await store.get_deleted_kvt(SC, "t")
    assert stored is not None and (stored.value, stored.version) == (5, first + 1)
