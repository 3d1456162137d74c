"""Commits and aborts of OPEN transactions asked for in one loop turn are one statement
(PgTxnStore.move_open_txn), and each call still gets what it would have had alone: an OPEN
transaction moves with its own request and its own commit-order position (in arrival order), a
missing or no-longer-OPEN transaction does not move and its caller decides from the record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.domain.requests import NewRequest, Processor, RequestKind
from app.domain.txns import TxnId, TxnStatus
from app.store import queries
from app.store.txns import PgTxnStore
from app.testing.controller import Services
from tests.store.test_segment_data_batched import Counting
from tests.support.txn_batches import controller_with_streams, open_txn

SC = "moves"
BATCHED = "-- move_txn of OPEN transactions ($6 NULL) for many"
ALONE = "-- OPEN -> COMMITTING (taking the next commit-order position)"


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with controller_with_streams(db_url, SC, ("a", "b")) as services:
        yield services


async def _open(services: Services, stream: str) -> TxnId:
    return await open_txn(services, SC, stream)


def _commit_request(services: Services, stream: str) -> NewRequest:
    return NewRequest(
        RequestKind.COMMIT_TXNS, SC, stream, services.clock.now_ms(), processor=Processor.COMMITS
    )


def _abort_request(services: Services, stream: str) -> NewRequest:
    return NewRequest(RequestKind.ABORT_TXN, SC, stream, services.clock.now_ms(), processor=Processor.ABORTS)


async def _record(services: Services, stream: str, txn: TxnId) -> tuple[str, int | None, str | None, int]:
    active = (await services.txn_store.get_txn(SC, stream, txn)).active
    assert active is not None
    record = active.value
    return record.status.value, record.commit_order, record.writer_id, active.version


async def _requests_for(services: Services, txn: TxnId) -> list[tuple[str, str, str]]:
    rows = await services.resources.pool.fetch(
        "SELECT processor, kind, stream FROM requests"
        " WHERE (payload->>'txn_high')::bigint = $1 AND (payload->>'txn_low')::bigint = $2",
        txn.high,
        txn.low,
    )
    return [(r["processor"], r["kind"], r["stream"]) for r in rows]


async def test_moves_of_one_turn_are_one_statement_with_each_calls_own_outcome(services: Services) -> None:
    first, second, other, aborted = (
        await _open(services, "a"),
        await _open(services, "a"),
        await _open(services, "b"),
        await _open(services, "a"),
    )
    committing = await _open(services, "a")
    assert (await services.transactions.commit(SC, "a", committing)).name == "SUCCESS"
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    commit_a, commit_b = _commit_request(services, "a"), _commit_request(services, "b")

    answers = await asyncio.gather(
        store.move_open_txn(SC, "a", second, TxnStatus.COMMITTING, commit_a, writer_id="w2", commit_time=5),
        store.move_open_txn(SC, "b", other, TxnStatus.COMMITTING, commit_b),
        store.move_open_txn(SC, "a", first, TxnStatus.COMMITTING, commit_a, writer_id="w1"),
        store.move_open_txn(SC, "a", aborted, TxnStatus.ABORTING, _abort_request(services, "a")),
        store.move_open_txn(SC, "a", TxnId(7, 7), TxnStatus.COMMITTING, commit_a),  # no such transaction
        store.move_open_txn(SC, "a", committing, TxnStatus.COMMITTING, commit_a),  # no longer OPEN
        store.move_open_txn("nowhere", "a", first, TxnStatus.COMMITTING, commit_a),  # no such stream
    )

    assert len(counting.statements) == 1 and counting.statements[0].startswith(BATCHED)
    assert answers[4:] == [None, None, None]
    streams = {second: "a", other: "b", first: "a", aborted: "a"}
    moved = {txn: await _record(services, stream, txn) for txn, stream in streams.items()}
    for txn, answer in zip((second, other, first, aborted), answers[:4], strict=True):
        assert answer == moved[txn][3]  # each call answered its own row's new version
    assert moved[second][0] == moved[first][0] == moved[other][0] == "COMMITTING"
    assert moved[second][2] == "w2" and moved[first][2] == "w1" and moved[other][2] is None
    assert moved[aborted][0] == "ABORTING" and moved[aborted][1] is None
    # Commit-order positions in the order the calls were made, after the earlier commit's.
    earlier = (await _record(services, "a", committing))[1]
    assert earlier is not None
    orders = [moved[txn][1] for txn in (second, other, first)]
    assert all(o is not None for o in orders)
    assert [earlier, *orders] == sorted([earlier, *orders]) and len(set(orders)) == 3
    # Each moved transaction has its own request, of its own kind, on its own stream.
    assert await _requests_for(services, second) == [("commits", "commit_txns", "a")]
    assert await _requests_for(services, other) == [("commits", "commit_txns", "b")]
    assert await _requests_for(services, first) == [("commits", "commit_txns", "a")]
    assert await _requests_for(services, aborted) == [("aborts", "abort_txn", "a")]
    assert await _requests_for(services, committing) == [("commits", "commit_txns", "a")]


async def test_the_same_transaction_moved_twice_in_a_turn_moves_once(services: Services) -> None:
    txn = await _open(services, "a")
    store = PgTxnStore(services.resources.pool)
    answers = await asyncio.gather(
        store.move_open_txn(SC, "a", txn, TxnStatus.COMMITTING, _commit_request(services, "a")),
        store.move_open_txn(SC, "a", txn, TxnStatus.ABORTING, _abort_request(services, "a")),
    )
    # The first ordinal wins; the other finds it no longer OPEN, and its service reads and decides.
    assert answers[0] is not None and answers[1] is None
    assert (await _record(services, "a", txn))[0] == "COMMITTING"
    assert await _requests_for(services, txn) == [("commits", "commit_txns", "a")]


async def test_a_lone_move_runs_alone(services: Services) -> None:
    txn = await _open(services, "a")
    counting = Counting(services.resources.pool)
    store = PgTxnStore(counting)  # type: ignore[arg-type]
    assert await store.move_open_txn(SC, "a", txn, TxnStatus.COMMITTING, _commit_request(services, "a"))
    assert len(counting.statements) == 1 and counting.statements[0].startswith(ALONE)


async def test_concurrent_service_calls_get_pravegas_answers(services: Services) -> None:
    """Through the service: repeated commits of one transaction all succeed (the losers read
    COMMITTING: already done); an abort racing a commit of the same transaction is refused."""
    repeated, crossed = await _open(services, "a"), await _open(services, "b")
    outcomes = await asyncio.gather(
        *(services.transactions.commit(SC, "a", repeated) for _ in range(4)),
        services.transactions.commit(SC, "b", crossed),
        services.transactions.abort(SC, "b", crossed),
    )
    assert [o.name for o in outcomes] == ["SUCCESS"] * 5 + ["FAILURE"]
    assert len(await _requests_for(services, repeated)) == 1


async def test_the_batched_statement_probes_transactions_by_their_whole_key(services: Services) -> None:
    """On a generic plan (as after five runs) over a freshly filled table, each move is a
    primary-key lookup, not a walk over every transaction of its stream."""
    txns = [await _open(services, "a") for _ in range(20)]
    now = services.clock.now_ms()
    columns: list[list[object]] = [[SC] * 3, ["a"] * 3, [t.high for t in txns[:3]], [t.low for t in txns[:3]]]
    columns += [["COMMITTING"] * 3, [None] * 3, [None] * 3, ["commits"] * 3, ["commit_txns"] * 3, [now] * 3]
    async with services.resources.pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            plan = "\n".join(
                row[0]
                for row in await conn.fetch("EXPLAIN " + queries.load("txns")["move_open_txns"], *columns)
            )
        finally:
            await conn.execute("RESET plan_cache_mode")
    probe = [line for line in plan.splitlines() if "Index Cond" in line and "txn_low" in line]
    assert probe and "stream_id" in probe[0] and "txn_high" in probe[0], plan


async def test_lone_moves_and_pings_find_their_transaction_by_its_whole_key_past_dead_open_entries(
    services: Services,
) -> None:
    """Many transactions moved out of OPEN leave dead entries in the partial index of OPEN ones
    until a vacuum; with statistics taken when few are OPEN, a lone move or ping must still look
    its row up by the primary key (a move walked those dead entries every time)."""
    store = PgTxnStore(services.resources.pool)
    moved = [await _open(services, "a") for _ in range(300)]
    left = await _open(services, "a")
    for txn in moved:
        assert await store.move_open_txn(SC, "a", txn, TxnStatus.COMMITTING, _commit_request(services, "a"))
    key = [SC, "a", left.high, left.low]
    statements = {
        "move_txn": [*key, "COMMITTING", None, None, None, "commits", "commit_txns", 0],
        "extend_lease": [*key, 10, 10, 0],
        "extend_open_lease": [*key, 0, 10, 10],
    }
    async with services.resources.pool.acquire() as conn:
        await conn.execute("ANALYZE transactions")
        for name, args in statements.items():
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.execute(f"SET plan_cache_mode = {mode}")
                try:
                    rows = await conn.fetch("EXPLAIN " + queries.load("txns")[name], *args)
                finally:
                    await conn.execute("RESET plan_cache_mode")
                plan = "\n".join(row[0] for row in rows)
                assert "transactions_pkey" in plan and "transactions_open_by_expiry" not in plan, (
                    name,
                    mode,
                    plan,
                )


async def test_a_commit_waiting_on_a_concurrent_ping_commits_the_version_the_ping_left(
    services: Services,
) -> None:
    """The lone move finds its row by key and updates it by row id, so a ping that updated the
    row meanwhile leaves it nothing to update; the service then reads the record and moves the
    version the ping left, as the move's contract says: the commit succeeds, once."""
    txn = await _open(services, "a")
    async with services.resources.pool.acquire() as pinging:
        async with pinging.transaction():
            args = [SC, "a", txn.high, txn.low, services.clock.now_ms(), 10_000, 600_000]
            assert await pinging.fetchval(queries.load("txns")["extend_open_lease"], *args) == 1
            commit = asyncio.create_task(services.transactions.commit(SC, "a", txn))
            await asyncio.sleep(0.3)
            assert not commit.done()  # waiting for the ping's row lock
        assert (await asyncio.wait_for(commit, 5)).name == "SUCCESS"
    status, order, _writer, version = await _record(services, "a", txn)
    assert (status, version) == ("COMMITTING", 2) and order is not None
    assert await _requests_for(services, txn) == [("commits", "commit_txns", "a")]
