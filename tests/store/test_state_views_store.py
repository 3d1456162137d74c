"""PgStateViewStore against a real database.

Reports: a record per (participant, state name, resource) whose version guards its partition
rows; only partitions whose state really changed are rewritten and logged; one notification per
report however many partitions it carries; a report that leaves nothing removes the record.
Removal: over the store at the versions read, and by deregistering a segment store (trigger).
The aggregator's batch: fenced by the leader term, conditional on the view versions read,
whole or nothing. Forced two-writer races for every versioned table of this capability
(registered in tests/store/test_versioned_races.py as covered here).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import asyncpg
import pytest

from app.domain.errors import NotFound, WriteConflict
from app.domain.state_views import AggregationBatch, ViewChange, ViewUpdate
from app.ports import HostAddress
from app.store.containers import PgContainerMapStore
from app.store.pool import asyncpg_dsn, create_pool
from app.store.state_views import PgStateViewStore
from tests.store.test_versioned_races import race

P1, P2 = "10.0.0.1:12345", "10.0.0.2:12345"
S, R = "SERVING", "db"


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Any]:
    pool = await create_pool(db_url, min_size=1, max_size=6)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def store(pool: Any) -> PgStateViewStore:
    return PgStateViewStore(pool)


async def lead(pool: Any, term: int) -> None:
    await pool.execute(
        "INSERT INTO cluster_leader (id, controller_id, term, since) VALUES (1, 'test', $1, 0) "
        "ON CONFLICT (id) DO UPDATE SET term = $1, version = cluster_leader.version + 1",
        term,
    )


async def logged(pool: Any) -> list[tuple[str, str, str]]:
    rows = await pool.fetch("SELECT state_name, resource, partition FROM state_changes ORDER BY seq")
    return [(r["state_name"], r["resource"], r["partition"]) for r in rows]


async def stored(store: PgStateViewStore, participant: str = P1) -> dict[str, str] | None:
    found = await store.participant_states(participant, S, R)
    return found[0].partitions if found else None


async def write(
    store: PgStateViewStore,
    partitions: dict[str, str | None],
    expected: int | None,
    *,
    replace: bool = True,
    participant: str = P1,
    now: int = 1_000,
) -> int | None:
    written = await store.write_states(
        participant, S, R, partitions, replace=replace, expected_version=expected, now_ms=now
    )
    return written.version


@pytest.fixture
async def listener(db_url: str) -> AsyncIterator[dict[str, list[str]]]:
    """Notifications received per channel, on a connection of their own."""
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    received: dict[str, list[str]] = {"pgc_states": [], "pgc_views": []}

    def on(_conn: object, _pid: int, channel: str, payload: str) -> None:
        received[channel].append(payload)

    for channel in received:
        await conn.add_listener(channel, on)
    try:
        yield received
    finally:
        await conn.close()


async def settle() -> None:
    # A round trip on another connection is not ordered with notification delivery; a short
    # sleep is, in practice, and every assertion after it also holds when it is late.
    await asyncio.sleep(0.2)


# --- reports ------------------------------------------------------------------------------------


async def test_a_report_creates_the_record_and_logs_every_partition(
    store: PgStateViewStore, pool: Any
) -> None:
    written = await store.write_states(
        P1, S, R, {"p0": "ONLINE", "p1": "OFFLINE"}, replace=True, expected_version=None, now_ms=1_000
    )
    assert (written.version, written.partition_count, written.changed, written.updated_at) == (0, 2, 2, 1_000)
    [record] = await store.participant_states(P1)
    assert (record.state_name, record.resource, record.version, record.updated_at) == (S, R, 0, 1_000)
    assert record.partitions == {"p0": "ONLINE", "p1": "OFFLINE"}
    assert await logged(pool) == [(S, R, "p0"), (S, R, "p1")]
    assert await store.resource_version(P1, S, R) == 0


async def test_a_replace_rewrites_only_what_changed(store: PgStateViewStore, pool: Any) -> None:
    await write(store, {"p0": "A", "p1": "B", "p2": "C"}, None, now=1_000)
    await pool.execute("DELETE FROM state_changes")

    written = await store.write_states(
        P1, S, R, {"p0": "A", "p1": "X", "p3": "D"}, replace=True, expected_version=0, now_ms=2_000
    )
    assert (written.version, written.partition_count, written.changed) == (1, 3, 3)
    assert await stored(store) == {"p0": "A", "p1": "X", "p3": "D"}
    assert sorted(await logged(pool)) == [(S, R, "p1"), (S, R, "p1"), (S, R, "p2"), (S, R, "p3")]
    since = dict(
        await pool.fetch("SELECT partition, updated_at FROM participant_states ORDER BY partition")  # type: ignore[arg-type]
    )
    assert since == {"p0": 1_000, "p1": 2_000, "p3": 2_000}  # p0 is the same row as before


async def test_a_merge_sets_and_removes_only_the_partitions_given(store: PgStateViewStore, pool: Any) -> None:
    await write(store, {"p0": "A", "p1": "B", "p2": "C"}, None)
    await pool.execute("DELETE FROM state_changes")

    assert await write(store, {"p1": "B", "p2": None, "p4": "E", "p9": None}, 0, replace=False) == 1
    assert await stored(store) == {"p0": "A", "p1": "B", "p4": "E"}
    assert sorted(await logged(pool)) == [(S, R, "p2"), (S, R, "p4")]


async def test_a_report_that_leaves_no_partition_removes_the_record(store: PgStateViewStore) -> None:
    await write(store, {"p0": "A", "p1": "B"}, None)
    written = await store.write_states(
        P1, S, R, {"p0": None, "p1": None}, replace=False, expected_version=0, now_ms=5
    )
    assert (written.version, written.partition_count, written.changed) == (None, 0, 2)
    assert await store.participant_states(P1) == []
    assert await store.resource_version(P1, S, R) is None

    await write(store, {"p0": "A"}, None)
    assert await write(store, {}, 0) is None
    assert await store.participant_states(P1) == []


async def test_a_stale_version_writes_nothing(store: PgStateViewStore, pool: Any) -> None:
    await write(store, {"p0": "A"}, None)
    assert await write(store, {"p0": "B"}, 0) == 1
    await pool.execute("DELETE FROM state_changes")

    with pytest.raises(WriteConflict):
        await write(store, {"p0": "C", "p1": "D"}, 0)
    with pytest.raises(WriteConflict):
        await write(store, {"p0": "C"}, None)  # "must not exist yet"
    with pytest.raises(WriteConflict):
        await write(store, {"p0": "C"}, 7, participant=P2)  # no record at all
    assert await stored(store) == {"p0": "B"}
    assert await store.resource_version(P1, S, R) == 1
    assert await logged(pool) == []


async def test_the_change_log_is_taken_oldest_first_grouped_by_partition(store: PgStateViewStore) -> None:
    await write(store, {"p0": "A", "p1": "A"}, None)  # entries 1, 2 (in some order)
    await write(store, {"p0": "B", "p1": "A"}, 0)  # p0 out and in: two more
    await write(store, {"p9": "C"}, None, participant=P2)
    taken = await store.take_changes(100)
    assert sorted((c.partition, len(c.seqs)) for c in taken) == [("p0", 3), ("p1", 1), ("p9", 1)]
    assert taken[-1].partition == "p9"
    assert all(list(c.seqs) == sorted(c.seqs) for c in taken)
    # A limit counts entries, not partitions.
    assert sum(len(c.seqs) for c in await store.take_changes(4)) == 4


async def test_one_notification_per_report_however_many_partitions(
    store: PgStateViewStore, pool: Any, listener: dict[str, list[str]]
) -> None:
    await write(store, {f"p{i}": "ONLINE" for i in range(1_000)}, None)
    await write(store, {f"p{i}": "OFFLINE" for i in range(1_000)}, 0)  # a delete and an insert
    await write(store, {f"p{i}": "OFFLINE" for i in range(1_000)}, 1)  # changes nothing
    await settle()
    assert listener["pgc_states"] == ["states", "states"]
    assert len(await logged(pool)) == 3_000

    config = await store.get_config()
    await store.set_config(["x"], config.version, 1)
    await settle()
    assert listener["pgc_states"][-1] == "config"


async def test_participants_and_filters(store: PgStateViewStore) -> None:
    await write(store, {"p0": "A", "p1": "B"}, None, now=10)
    await store.write_states(P1, "OTHER", "kv", {"q": "1"}, replace=True, expected_version=None, now_ms=20)
    await write(store, {"p0": "C"}, None, participant=P2, now=5)

    summaries = await store.participants()
    assert [(p.participant, p.resources, p.partitions, p.last_report_at) for p in summaries] == [
        (P1, 2, 3, 20),
        (P2, 1, 1, 5),
    ]
    assert [(r.state_name, r.resource) for r in await store.participant_states(P1)] == [
        ("OTHER", "kv"),
        (S, R),
    ]
    assert [r.resource for r in await store.participant_states(P1, state_name="OTHER")] == ["kv"]
    assert [r.state_name for r in await store.participant_states(P1, resource=R)] == [S]
    assert await store.participant_states("nobody") == []


# --- removal ------------------------------------------------------------------------------------


async def test_removing_a_participant_takes_all_its_states_at_the_versions_read(
    store: PgStateViewStore, pool: Any
) -> None:
    await write(store, {"p0": "A", "p1": "B"}, None)
    await store.write_states(P1, "OTHER", "kv", {"q": "1"}, replace=True, expected_version=None, now_ms=1)
    await write(store, {"p0": "C"}, None, participant=P2)
    await pool.execute("DELETE FROM state_changes")
    expected = await store.participant_versions(P1)
    assert expected == {(S, R): 0, ("OTHER", "kv"): 0}

    assert await store.remove_participant(P1, expected) == 2
    assert await store.participant_states(P1) == []
    assert await stored(store, P2) == {"p0": "C"}
    assert sorted(await logged(pool)) == [("OTHER", "kv", "q"), (S, R, "p0"), (S, R, "p1")]


async def test_a_removal_fails_whole_when_a_record_moved_or_appeared(store: PgStateViewStore) -> None:
    await write(store, {"p0": "A"}, None)
    expected = await store.participant_versions(P1)
    await write(store, {"p0": "B"}, 0)  # moved
    with pytest.raises(WriteConflict):
        await store.remove_participant(P1, expected)
    assert await stored(store) == {"p0": "B"}

    expected = await store.participant_versions(P1)
    await store.write_states(P1, "NEW", "r", {"x": "1"}, replace=True, expected_version=None, now_ms=1)
    with pytest.raises(WriteConflict):
        await store.remove_participant(P1, expected)  # appeared after the read
    assert len(await store.participant_states(P1)) == 2


@pytest.mark.parametrize(
    ("host", "participant"),
    [(HostAddress("10.0.0.1", 12345), P1), (HostAddress("::1", 12345), "[::1]:12345")],
    ids=["ipv4", "ipv6"],
)
async def test_deregistering_a_segment_store_removes_its_states(
    store: PgStateViewStore, pool: Any, host: HostAddress, participant: str
) -> None:
    hosts = PgContainerMapStore(pool)
    await hosts.register_host(host, 1)
    await write(store, {"p0": "A", "p1": "B"}, None, participant=participant)
    await write(store, {"p0": "C"}, None, participant="someone-else")
    await pool.execute("DELETE FROM state_changes")

    await hosts.deregister_host(host, (await hosts.get_host(host)).version)

    assert await store.participant_states(participant) == []
    assert await store.participant_versions(participant) == {}
    assert await stored(store, "someone-else") == {"p0": "C"}
    assert sorted(await logged(pool)) == [(S, R, "p0"), (S, R, "p1")]


# --- the config ---------------------------------------------------------------------------------


async def test_the_config_starts_empty_and_moves_at_the_version_read(store: PgStateViewStore) -> None:
    config = await store.get_config()
    assert (config.state_names, config.version, config.updated_at) == ((), 0, 0)
    assert await store.set_config(["A", "B"], 0, 50) == 1
    with pytest.raises(WriteConflict):
        await store.set_config(["C"], 0, 60)
    config = await store.get_config()
    assert (config.state_names, config.version, config.updated_at) == (("A", "B"), 1, 50)


# --- the aggregator's batch ---------------------------------------------------------------------


def folded(partitions: dict[str, dict[str, str]]) -> dict[str, str | None]:
    """Partition views as the aggregator passes them: JSON text, {} for a removal (None)."""
    return {p: json.dumps(v) if v else None for p, v in partitions.items()}


def update(partitions: dict[str, dict[str, str]], resource: str = R) -> ViewUpdate:
    return ViewUpdate(S, resource, folded(partitions))


async def test_a_batch_creates_moves_and_removes_views(
    store: PgStateViewStore, pool: Any, listener: dict[str, list[str]]
) -> None:
    await lead(pool, 3)
    created = await store.apply_aggregation(
        3, AggregationBatch(updates=(update({"p0": {P1: "ON"}, "p1": {P1: "ON", P2: "OFF"}}),)), 100
    )
    assert created is not None
    [change] = created
    first = change.version
    assert (change.state_name, change.resource) == (S, R) and first is not None
    view = await store.get_view(S, R)
    assert (view.version, view.updated_at) == (first, 100)
    assert view.partitions == {"p0": {P1: "ON"}, "p1": {P1: "ON", P2: "OFF"}}

    # Unchanged partitions do not move the view; changed ones do, to a higher version.
    same = await store.apply_aggregation(
        3, AggregationBatch(updates=(update({"p0": {P1: "ON"}}),), expected={(S, R): first}), 200
    )
    assert same == []
    moved = await store.apply_aggregation(
        3, AggregationBatch(updates=(update({"p0": {}}),), expected={(S, R): first}), 300
    )
    assert moved is not None and moved[0].version is not None and moved[0].version > first
    assert (await store.get_view(S, R)).partitions == {"p1": {P1: "ON", P2: "OFF"}}

    removed = await store.apply_aggregation(
        3, AggregationBatch(updates=(update({"p1": {}}),), expected={(S, R): moved[0].version}), 400
    )
    assert removed == [ViewChange(S, R, None)]
    with pytest.raises(NotFound):
        await store.get_view(S, R)
    await settle()
    assert listener["pgc_views"] == [f"{S}/{R}:{first}", f"{S}/{R}:{moved[0].version}", f"{S}/{R}:deleted"]


async def test_a_batch_under_another_term_writes_nothing(store: PgStateViewStore, pool: Any) -> None:
    await write(store, {"p0": "ON"}, None)
    [entry] = await store.take_changes(10)
    batch = AggregationBatch(updates=(update({"p0": {P1: "ON"}}),), consumed=entry.seqs, built=(S,))
    assert await store.apply_aggregation(1, batch, 1) is None  # no leader at all yet
    await lead(pool, 2)
    assert await store.apply_aggregation(1, batch, 1) is None  # a deposed leader's term
    assert await store.list_views() == []
    assert await store.take_changes(10) == [entry]
    assert await store.built_names() == frozenset()

    assert await store.apply_aggregation(2, batch, 1) is not None
    assert [v.partition_count for v in await store.list_views()] == [1]
    assert await store.take_changes(10) == []
    assert await store.built_names() == frozenset({S})


async def test_a_batch_at_a_stale_view_version_writes_nothing(store: PgStateViewStore, pool: Any) -> None:
    await lead(pool, 1)
    await write(store, {"p0": "ON"}, None)
    [entry] = await store.take_changes(10)
    created = await store.apply_aggregation(1, AggregationBatch(updates=(update({"p0": {P1: "ON"}}),)), 1)
    assert created is not None and created[0].version is not None
    version = created[0].version

    stale_batches = [
        # Read as absent, but it exists.
        AggregationBatch(updates=(update({"p0": {P1: "OFF"}}),), consumed=entry.seqs),
        # Read at another version.
        AggregationBatch(
            updates=(update({"p0": {P1: "OFF"}}),), consumed=entry.seqs, expected={(S, R): version + 1}
        ),
        # A complete build that did not read the view it would empty.
        AggregationBatch(updates=(ViewUpdate(S, "other", folded({"q": {P1: "x"}}), complete=True),)),
        # A drop that did not read the view.
        AggregationBatch(dropped=(S,)),
    ]
    for batch in stale_batches:
        with pytest.raises(WriteConflict):
            await store.apply_aggregation(1, batch, 2)
    view = await store.get_view(S, R)
    assert (view.version, view.partitions) == (version, {"p0": {P1: "ON"}})
    assert await store.take_changes(10) == [entry]
    assert [v.resource for v in await store.list_views()] == [R]


async def test_dropping_a_state_name_removes_all_its_views(store: PgStateViewStore, pool: Any) -> None:
    await lead(pool, 1)
    batch = AggregationBatch(
        updates=(
            ViewUpdate(S, "a", folded({"p": {P1: "x"}}), complete=True),
            ViewUpdate(S, "b", folded({"p": {P1: "y"}}), complete=True),
            ViewUpdate("KEPT", "a", folded({"p": {P1: "z"}})),
        ),
        built=(S, "KEPT"),
    )
    assert await store.apply_aggregation(1, batch, 1) is not None
    expected = await store.views_of_names([S])
    assert sorted(expected) == [(S, "a"), (S, "b")]

    dropped = await store.apply_aggregation(1, AggregationBatch(dropped=(S,), expected=dict(expected)), 2)
    assert dropped == [ViewChange(S, "a", None), ViewChange(S, "b", None)]
    assert [(v.state_name, v.resource) for v in await store.list_views()] == [("KEPT", "a")]
    assert await store.built_names() == frozenset({"KEPT"})
    assert (
        await pool.fetchval("SELECT count(*) FROM customized_view_partitions WHERE state_name = $1", S) == 0
    )


async def test_view_versions_keep_growing_across_removal_and_rebuilding(
    store: PgStateViewStore, pool: Any
) -> None:
    await lead(pool, 1)
    first = await store.apply_aggregation(1, AggregationBatch(updates=(update({"p": {P1: "x"}}),)), 1)
    assert first is not None and first[0].version is not None
    await store.apply_aggregation(
        1, AggregationBatch(updates=(update({"p": {}}),), expected={(S, R): first[0].version}), 2
    )
    again = await store.apply_aggregation(1, AggregationBatch(updates=(update({"p": {P1: "x"}}),)), 3)
    assert again is not None and again[0].version is not None
    assert again[0].version > first[0].version


# --- forced two-writer races --------------------------------------------------------------------


def harness(pool: Any) -> Any:
    return SimpleNamespace(pool=pool)


@pytest.mark.parametrize("table", ["participant_resources", "participant_states"])
async def test_two_reports_at_one_version_exactly_one_lands(
    store: PgStateViewStore, pool: Any, table: str
) -> None:
    """Whichever table the writers queue on, the record's version lets exactly one through."""
    await write(store, {"p0": "A", "p1": "A"}, None)
    variants = ({"p0": "B", "p1": "B"}, {"p0": "C", "p2": "C"})

    async def writer(i: int) -> int:
        version = await write(store, dict(variants[i]), 0)
        assert version is not None
        return version

    results = await race(harness(pool), table, [lambda: writer(0), lambda: writer(1)])
    winners = [i for i, r in enumerate(results) if r == 1]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    assert await stored(store) == variants[winners[0]]
    assert await store.resource_version(P1, S, R) == 1


async def test_two_first_reports_exactly_one_creates(store: PgStateViewStore, pool: Any) -> None:
    variants = ({"p0": "B"}, {"p1": "C"})

    async def writer(i: int) -> int:
        version = await write(store, dict(variants[i]), None)
        assert version is not None
        return version

    results = await race(harness(pool), "participant_resources", [lambda: writer(0), lambda: writer(1)])
    winners = [i for i, r in enumerate(results) if r == 0]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    assert await stored(store) == variants[winners[0]]


async def test_a_report_and_a_removal_race_one_wins_whole(store: PgStateViewStore, pool: Any) -> None:
    await write(store, {"p0": "A"}, None)
    expected = await store.participant_versions(P1)

    async def remove() -> int:
        return await store.remove_participant(P1, expected) * 100

    async def report() -> int:
        version = await write(store, {"p0": "B"}, 0)
        assert version is not None
        return version

    results = await race(harness(pool), "participant_resources", [remove, report])
    assert sum(isinstance(r, WriteConflict) for r in results) == 1, results
    if results[0] == 100:
        assert await store.participant_states(P1) == []
    else:
        assert results[1] == 1 and await stored(store) == {"p0": "B"}


async def test_two_config_writers_at_one_version_exactly_one_lands(
    store: PgStateViewStore, pool: Any
) -> None:
    names = (["A"], ["B", "C"])
    results = await race(
        harness(pool),
        "state_view_config",
        [lambda: store.set_config(names[0], 0, 1), lambda: store.set_config(names[1], 0, 2)],
    )
    winners = [i for i, r in enumerate(results) if r == 1]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    assert (await store.get_config()).state_names == tuple(names[winners[0]])


async def test_two_batches_at_one_view_version_exactly_one_lands(store: PgStateViewStore, pool: Any) -> None:
    await lead(pool, 1)
    created = await store.apply_aggregation(1, AggregationBatch(updates=(update({"p": {P1: "x"}}),)), 1)
    assert created is not None and created[0].version is not None
    version = created[0].version
    contents = ({"p": {P1: "A"}}, {"p": {P1: "B"}, "q": {P2: "B"}})

    async def batch(i: int) -> int:
        changes = await store.apply_aggregation(
            1, AggregationBatch(updates=(update(contents[i]),), expected={(S, R): version}), 2
        )
        assert changes is not None and changes[0].version is not None
        return changes[0].version

    results = await race(harness(pool), "customized_views", [lambda: batch(0), lambda: batch(1)])
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    view = await store.get_view(S, R)
    assert view.version == results[winners[0]] and view.version > version
    assert view.partitions == contents[winners[0]]


async def test_two_batches_creating_one_view_exactly_one_lands(store: PgStateViewStore, pool: Any) -> None:
    await lead(pool, 1)
    contents = ({"p": {P1: "A"}}, {"q": {P2: "B"}})

    async def batch(i: int) -> int:
        changes = await store.apply_aggregation(1, AggregationBatch(updates=(update(contents[i]),)), 2)
        assert changes is not None and changes[0].version is not None
        return changes[0].version

    results = await race(harness(pool), "customized_views", [lambda: batch(0), lambda: batch(1)])
    winners = [i for i, r in enumerate(results) if isinstance(r, int)]
    assert len(winners) == 1 and sum(isinstance(r, WriteConflict) for r in results) == 1, results
    assert (await store.get_view(S, R)).partitions == contents[winners[0]]
