"""Every versioned table: two writers that read the same version race, and exactly one wins.

The race is forced, not hoped for: a third transaction holds a lock on the table that blocks
both writers until the database shows both of them waiting, and only then lets them go. The
loser must get WriteConflict and the stored row must be the winner's.

`test_every_versioned_table_has_a_race_test` walks the declared schema so that a new table
with a `version` column fails the suite until a race test for it is added here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import segment_id
from app.domain.records import (
    EpochTransitionRecord,
    ScalingPolicy,
    ScopeState,
    StreamConfig,
    StreamState,
    TruncationRecord,
)
from app.domain.requests import NewRequest, Processor, RequestKind
from app.domain.txns import TxnId
from app.ports import CommitBatch
from app.testing.controller import Services, running_controller
from migrations import schema

SCOPE = "racescope"
STREAM = "racestream"
SHARD = 0

# embedded_segments is versioned too; its concurrent writers (merge-once, seal, append) are
# covered by tests/store/test_segment_store_contract.py, which drives it through the port.
# stream_waiting_processors is set-if-absent and cleared only by its holder; its race test is
# in tests/store/test_request_queue.py.
# container_map and segment_store_hosts race in tests/store/test_container_store.py (whole-map
# replacement; deregistration at the version read).
# segment_cold_markers races (insert and update) in tests/store/test_autoscale_store.py.
COVERED_ELSEWHERE = frozenset(
    {
        # accounts (update/update, update/remove, add/add): tests/store/test_account_races.py.
        "accounts",
        # The cluster's tables: tests/store/test_cluster_races.py.
        "cluster_settings",
        "controllers",
        "cluster_leader",
        "bucket_owners",
        "embedded_segments",
        "stream_waiting_processors",
        "container_map",
        "segment_store_hosts",
        "segment_cold_markers",
        # stream_report_totals: written only by migration 0019's triggers, as deltas that commute
        # (insert/insert of segments, upsert/upsert of sealed sizes): tests/store/test_report_totals_races.py.
        "stream_report_totals",
        # stream_subscribers: update/update and update/delete in tests/store/test_retention_store.py.
        "stream_subscribers",
        # writer_marks: create/create, update/update and note/round bookkeeping races in
        # tests/store/test_watermark_store.py.
        "writer_marks",
        # kvtables (state/state, delete/state) and deleted_kvtables (insert, update):
        # tests/store/test_kvt_store.py.
        "kvtables",
        "deleted_kvtables",
        # reader_groups (update/update, update/delete, create/create): tests/store/test_reader_group_store.py.
        "reader_groups",
        # Customized state views: participant_resources (update/update, create/create,
        # report/removal), state_view_config and customized_views (batch/batch, create/create):
        # tests/store/test_state_views_store.py.
        "participant_resources",
        "state_view_config",
        "customized_views",
        # The embedded segment store's data (every write under its segment's row lock):
        # segment_chunks and segment_attributes (concurrent appenders, a writer racing itself,
        # attribute compare-and-set, merges racing merges and appends) in
        # tests/store/test_segment_data.py; table_entries (conditional updates of one key) in
        # tests/store/test_segment_data_tables.py.
        "segment_chunks",
        "segment_attributes",
        "table_entries",
        # The long-term tier's index: two storage writers recording the same rows, two collectors
        # claiming the same objects, in tests/store/test_tiering.py.
        "segment_tiered_chunks",
        "tier_garbage",
    }
)


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    # Store races only: no workers run, so nothing but the two writers touches the rows.
    async with running_controller(db_url, workers=False) as running:
        yield running


async def make_stream(services: Services) -> None:
    await services.scopes.create_scope(SCOPE)
    await services.streams.create_stream(SCOPE, STREAM, StreamConfig(ScalingPolicy.fixed(2)))


# --- the cases: one per versioned table (two for the insert-or-update tables) --------------


@dataclass(frozen=True)
class Case:
    id: str
    table: str
    # Prepares the record; returns the version both writers read (None: both insert).
    setup: Callable[[Services], Awaitable[int | None]]
    # Writes variant 0 or 1 at the given expected version; returns the new version.
    write: Callable[[Services, int, int | None], Awaitable[int]]
    # The stored (value, version).
    read: Callable[[Services], Awaitable[tuple[Any, int]]]
    # The value that variant 0 or 1 leaves behind, as `read` returns it.
    expected: Callable[[int], Any]


# scopes


async def _scope_setup(s: Services) -> int:
    await s.scopes.create_scope(SCOPE)
    return (await s.scope_store.get_scope(SCOPE)).version


_SCOPE_STATES = (ScopeState.DELETING, ScopeState.ACTIVE)


async def _scope_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.scope_store.set_scope_state(SCOPE, _SCOPE_STATES[variant], version)


async def _scope_read(s: Services) -> tuple[Any, int]:
    v = await s.scope_store.get_scope(SCOPE)
    return v.value, v.version


# stream_configs

_CONFIGS = (StreamConfig(ScalingPolicy.fixed(3)), StreamConfig(ScalingPolicy.fixed(4), tags=("b",)))


async def _config_setup(s: Services) -> int:
    await make_stream(s)
    return (await s.stream_store.get_config(SCOPE, STREAM)).version


async def _config_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_config(SCOPE, STREAM, _CONFIGS[variant], variant == 1, version)


async def _config_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_config_record(SCOPE, STREAM)
    return v.value, v.version


# stream_states

_STATES = (StreamState.SCALING, StreamState.SEALING)


async def _state_setup(s: Services) -> int:
    await make_stream(s)
    return (await s.stream_store.get_state(SCOPE, STREAM)).version


async def _state_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_state(SCOPE, STREAM, _STATES[variant], version)


async def _state_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_state(SCOPE, STREAM)
    return v.value, v.version


# stream_current_epochs


async def _epoch_setup(s: Services) -> int:
    await make_stream(s)
    return (await s.stream_store.get_current_epoch_pointer(SCOPE, STREAM)).version


async def _epoch_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_current_epoch_pointer(SCOPE, STREAM, 10 + variant, version)


async def _epoch_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_current_epoch_pointer(SCOPE, STREAM)
    return v.value, v.version


# stream_truncations

_TRUNCATIONS = (
    TruncationRecord(stream_cut={0: 10, 1: 20}, span={0: 0, 1: 0}, size_till=30, updating=True),
    TruncationRecord(
        stream_cut={0: 5, 1: 7},
        span={0: 0, 1: 0},
        deleted_segments=frozenset({9}),
        to_delete=frozenset({8}),
        size_till=12,
    ),
)


async def _truncation_setup(s: Services) -> int:
    await make_stream(s)
    return (await s.stream_store.get_truncation(SCOPE, STREAM)).version


async def _truncation_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_truncation(SCOPE, STREAM, _TRUNCATIONS[variant], version)


async def _truncation_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_truncation(SCOPE, STREAM)
    return v.value, v.version


# stream_epoch_transitions

_TRANSITIONS = (
    EpochTransitionRecord(
        active_epoch=0,
        time=1000,
        segments_to_seal=frozenset({0}),
        new_segments=((segment_id(2, 1), 0.0, 0.25), (segment_id(3, 1), 0.25, 0.5)),
    ),
    EpochTransitionRecord(
        active_epoch=0,
        time=2000,
        segments_to_seal=frozenset({0, 1}),
        new_segments=((segment_id(2, 1), 0.0, 1.0),),
    ),
)


async def _transition_setup(s: Services) -> int:
    await make_stream(s)
    v = await s.stream_store.get_epoch_transition(SCOPE, STREAM)
    assert v.value is None
    return v.version


async def _transition_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_epoch_transition(SCOPE, STREAM, _TRANSITIONS[variant], version)


async def _transition_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_epoch_transition(SCOPE, STREAM)
    return v.value, v.version


# segments


async def _segment_setup(s: Services) -> int:
    await make_stream(s)
    v = await s.stream_store.get_segment(SCOPE, STREAM, 1)
    assert v.value[1] is None
    return v.version


async def _segment_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.stream_store.set_segment_sealed_epoch(SCOPE, STREAM, 1, 5 + variant, version)


async def _segment_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_segment(SCOPE, STREAM, 1)
    return v.value[1], v.version


# sealed_size_shards

_SIZES = ({0: 100, 1: 200}, {0: 7})


async def _shard_insert_setup(s: Services) -> None:
    await make_stream(s)
    assert await s.stream_store.get_sealed_size_shard(SCOPE, STREAM, SHARD) is None
    return None


async def _shard_update_setup(s: Services) -> int:
    await make_stream(s)
    await s.stream_store.put_sealed_size_shard(SCOPE, STREAM, SHARD, {5: 5}, None)
    v = await s.stream_store.get_sealed_size_shard(SCOPE, STREAM, SHARD)
    assert v is not None
    return v.version


async def _shard_write(s: Services, variant: int, version: int | None) -> int:
    return await s.stream_store.put_sealed_size_shard(SCOPE, STREAM, SHARD, _SIZES[variant], version)


async def _shard_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_sealed_size_shard(SCOPE, STREAM, SHARD)
    assert v is not None, "the sealed-size shard is missing"
    return v.value, v.version


# deleted_streams


async def _deleted_insert_setup(s: Services) -> None:
    assert await s.stream_store.get_deleted_stream(SCOPE, STREAM) is None
    return None


async def _deleted_update_setup(s: Services) -> int:
    await s.stream_store.put_deleted_stream(SCOPE, STREAM, 1, None)
    v = await s.stream_store.get_deleted_stream(SCOPE, STREAM)
    assert v is not None
    return v.version


async def _deleted_write(s: Services, variant: int, version: int | None) -> int:
    return await s.stream_store.put_deleted_stream(SCOPE, STREAM, 20 + variant, version)


async def _deleted_read(s: Services) -> tuple[Any, int]:
    v = await s.stream_store.get_deleted_stream(SCOPE, STREAM)
    assert v is not None, "the deleted-stream record is missing"
    return v.value, v.version


CASES = (
    Case("scopes", "scopes", _scope_setup, _scope_write, _scope_read, lambda i: _SCOPE_STATES[i]),
    Case(
        "stream_configs",
        "stream_configs",
        _config_setup,
        _config_write,
        _config_read,
        lambda i: (_CONFIGS[i], i == 1),
    ),
    Case("stream_states", "stream_states", _state_setup, _state_write, _state_read, lambda i: _STATES[i]),
    Case(
        "stream_current_epochs",
        "stream_current_epochs",
        _epoch_setup,
        _epoch_write,
        _epoch_read,
        lambda i: 10 + i,
    ),
    Case(
        "stream_truncations",
        "stream_truncations",
        _truncation_setup,
        _truncation_write,
        _truncation_read,
        lambda i: _TRUNCATIONS[i],
    ),
    Case(
        "stream_epoch_transitions",
        "stream_epoch_transitions",
        _transition_setup,
        _transition_write,
        _transition_read,
        lambda i: _TRANSITIONS[i],
    ),
    Case("segments", "segments", _segment_setup, _segment_write, _segment_read, lambda i: 5 + i),
    Case(
        "sealed_size_shards-insert",
        "sealed_size_shards",
        _shard_insert_setup,
        _shard_write,
        _shard_read,
        lambda i: _SIZES[i],
    ),
    Case(
        "sealed_size_shards-update",
        "sealed_size_shards",
        _shard_update_setup,
        _shard_write,
        _shard_read,
        lambda i: _SIZES[i],
    ),
    Case(
        "deleted_streams-insert",
        "deleted_streams",
        _deleted_insert_setup,
        _deleted_write,
        _deleted_read,
        lambda i: 20 + i,
    ),
    Case(
        "deleted_streams-update",
        "deleted_streams",
        _deleted_update_setup,
        _deleted_write,
        _deleted_read,
        lambda i: 20 + i,
    ),
)

# requests: a COMMITS request postponed twice (no workers run in these tests).

_REQUEST_ID: dict[int, int] = {}


async def _request_setup(s: Services) -> int:
    request_id = await s.requests.enqueue(
        NewRequest(RequestKind.SCALE, SCOPE, STREAM, 1, processor=Processor.COMMITS)
    )
    _REQUEST_ID[id(s)] = request_id
    found = await s.requests.get(request_id)
    assert found is not None
    return found.version


async def _request_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    current = await s.requests.get(_REQUEST_ID[id(s)])
    assert current is not None
    stale = dataclasses.replace(current, version=version)
    return (await s.requests.postpone(stale, 1000 + variant, f"writer {variant}")).version


async def _request_read(s: Services) -> tuple[Any, int]:
    found = await s.requests.get(_REQUEST_ID[id(s)])
    assert found is not None
    return (found.not_before, found.last_error), found.version


CASES = (
    *CASES,
    Case(
        "requests",
        "requests",
        _request_setup,
        _request_write,
        _request_read,
        lambda i: (1000 + i, f"writer {i}"),
    ),
)

# transactions: two pings extend the same lease.


async def _txn_setup(s: Services) -> int:
    await make_stream(s)
    created = await s.txn_store.create_txn(SCOPE, STREAM, 0, 1_000, 10_000, 100_000)
    _TXN[id(s)] = created.txn
    lookup = await s.txn_store.get_txn(SCOPE, STREAM, created.txn)
    assert lookup.active is not None
    return lookup.active.version


_TXN: dict[int, TxnId] = {}


async def _txn_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    lease = 20_000 + variant
    return await s.txn_store.extend_lease(SCOPE, STREAM, _TXN[id(s)], lease, 2_000 + lease, version)


async def _txn_read(s: Services) -> tuple[Any, int]:
    lookup = await s.txn_store.get_txn(SCOPE, STREAM, _TXN[id(s)])
    assert lookup.active is not None
    return lookup.active.value.lease_ms, lookup.active.version


# committing_txns: two commit processors both decide the batch rolls over different epochs.


async def _committing_setup(s: Services) -> int:
    await make_stream(s)
    return await s.txn_store.start_commit_batch(SCOPE, STREAM, CommitBatch(0, (TxnId(1, 1),)), None)


async def _committing_write(s: Services, variant: int, version: int | None) -> int:
    assert version is not None
    return await s.txn_store.set_rolling_epoch(SCOPE, STREAM, 5 + variant, version)


async def _committing_read(s: Services) -> tuple[Any, int]:
    record = await s.txn_store.get_committing(SCOPE, STREAM)
    assert record.batch is not None and record.version is not None
    return record.batch.rolling_active_epoch, record.version


CASES = (
    *CASES,
    Case("transactions", "transactions", _txn_setup, _txn_write, _txn_read, lambda i: 20_000 + i),
    Case(
        "committing_txns",
        "committing_txns",
        _committing_setup,
        _committing_write,
        _committing_read,
        lambda i: 5 + i,
    ),
)

RACED_TABLES = frozenset(c.table for c in CASES)
COVERED_TABLES = RACED_TABLES | COVERED_ELSEWHERE


# --- the race harness -------------------------------------------------------------------------


LOCK_WAIT_SECONDS = 10.0


async def _wait_for_lock_waiters(conn: Any, count: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_WAIT_SECONDS
    while True:
        # Inside a transaction pg_stat_activity is a snapshot taken at first use; refresh it.
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        if waiting >= count:
            return
        if loop.time() > deadline:
            raise AssertionError(
                f"only {waiting} of {count} writers reached the lock in {LOCK_WAIT_SECONDS}s"
            )
        await asyncio.sleep(0.01)


async def race(
    services: Services, table: str, writers: list[Callable[[], Awaitable[int]]]
) -> list[int | BaseException]:
    """Runs the writers concurrently, all released at once from behind a table lock."""
    tasks: list[asyncio.Future[int]] = []
    try:
        async with services.pool.acquire() as holder, holder.transaction():
            # Blocks INSERT/UPDATE/DELETE on the table (not reads) until the transaction ends.
            await holder.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
            tasks = [asyncio.ensure_future(w()) for w in writers]
            await _wait_for_lock_waiters(holder, len(writers))
    finally:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    return list(results)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_two_writers_exactly_one_wins(services: Services, case: Case) -> None:
    version = await case.setup(services)
    results = await race(
        services,
        case.table,
        [lambda: case.write(services, 0, version), lambda: case.write(services, 1, version)],
    )

    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    losers = [i for i, r in enumerate(results) if isinstance(r, WriteConflict)]
    assert len(winners) == 1 and len(losers) == 1, f"expected one winner and one WriteConflict: {results!r}"
    winner = winners[0]
    new_version = results[winner]
    assert new_version == (0 if version is None else version + 1)

    value, stored_version = await case.read(services)
    assert stored_version == new_version
    assert value == case.expected(winner)
    assert value != case.expected(1 - winner)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_stale_version_after_a_successful_write_conflicts(services: Services, case: Case) -> None:
    version = await case.setup(services)
    first = await case.write(services, 0, version)
    assert first == (0 if version is None else version + 1)

    with pytest.raises(WriteConflict):
        await case.write(services, 1, version)

    value, stored_version = await case.read(services)
    assert (value, stored_version) == (case.expected(0), first)

    # The fresh version still works: the conflict was about the version, nothing else.
    if version is not None:
        assert await case.write(services, 1, first) == first + 1
        assert await case.read(services) == (case.expected(1), first + 1)


MISSING_STREAM_WRITES: dict[str, Callable[[Services], Awaitable[int]]] = {
    "set_config": lambda s: s.stream_store.set_config(SCOPE, "missing", _CONFIGS[0], False, 0),
    "set_state": lambda s: s.stream_store.set_state(SCOPE, "missing", StreamState.ACTIVE, 0),
    "set_current_epoch_pointer": lambda s: s.stream_store.set_current_epoch_pointer(SCOPE, "missing", 1, 0),
    "set_truncation": lambda s: s.stream_store.set_truncation(SCOPE, "missing", _TRUNCATIONS[0], 0),
    "set_epoch_transition": lambda s: s.stream_store.set_epoch_transition(
        SCOPE, "missing", _TRANSITIONS[0], 0
    ),
    "set_segment_sealed_epoch": lambda s: s.stream_store.set_segment_sealed_epoch(SCOPE, "missing", 0, 1, 0),
    "put_sealed_size_shard-insert": lambda s: s.stream_store.put_sealed_size_shard(
        SCOPE, "missing", 0, {0: 1}, None
    ),
    "put_sealed_size_shard-update": lambda s: s.stream_store.put_sealed_size_shard(
        SCOPE, "missing", 0, {0: 1}, 0
    ),
    "set_scope_state": lambda s: s.scope_store.set_scope_state("missing", ScopeState.DELETING, 0),
}


@pytest.mark.parametrize("write", list(MISSING_STREAM_WRITES.values()), ids=list(MISSING_STREAM_WRITES))
async def test_conditional_write_on_a_missing_record_is_not_found(
    services: Services, write: Callable[[Services], Awaitable[int]]
) -> None:
    await make_stream(services)  # the scope and another stream exist; "missing" does not
    with pytest.raises(NotFound):
        await write(services)
    assert not await services.stream_store.stream_exists(SCOPE, "missing")


def test_every_versioned_table_has_a_race_test() -> None:
    versioned = {name for name, table in schema.metadata.tables.items() if "version" in table.columns}
    missing = versioned - COVERED_TABLES
    assert not missing, f"versioned tables without a two-writer race test: {sorted(missing)}"
    stale = COVERED_TABLES - versioned
    assert not stale, f"covered tables that are not versioned (or no longer exist): {sorted(stale)}"
