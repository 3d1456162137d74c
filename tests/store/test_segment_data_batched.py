"""PgSegmentStorage's batched calls against the suite's PostgreSQL: creates asked for at once
are one statement, merges into several targets at once are one transaction, and each caller
still gets the outcome it would have had alone (a duplicate name, a sealed target)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from app.segmentstore.storage import AppendRequest, NoSuchSegment, SegmentAlreadyExists, SegmentSealed
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

PARENTS = [f"scope/stream/{n}.#epoch.0" for n in range(3)]
TXN = "#transaction.000000000000000000000000000000{:02d}"


class Counting:
    """The pool, with the statements it was asked to run recorded (first line of each)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.statements: list[str] = []

    def _note(self, query: str) -> None:
        self.statements.append(query.strip().splitlines()[0])

    async def fetch(self, query: str, *args: object) -> Any:
        self._note(query)
        return await self.db.fetch(query, *args)

    async def fetchrow(self, query: str, *args: object) -> Any:
        self._note(query)
        return await self.db.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: object) -> Any:
        self._note(query)
        return await self.db.fetchval(query, *args)

    async def execute(self, query: str, *args: object) -> str:
        self._note(query)
        return await self.db.execute(query, *args)

    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None:
        self._note(command)
        await self.db.executemany(command, args)

    def transaction(self) -> Any:
        self.statements.append("BEGIN")
        return self.db.transaction()


@pytest.fixture
def counting(db: Database) -> Counting:
    return Counting(db)


@pytest.fixture
def storage(counting: Counting) -> PgSegmentStorage:
    return PgSegmentStorage(counting, ManualClock(5_000))  # type: ignore[arg-type]


def named(counting: Counting, marker: str) -> int:
    return sum(marker in s for s in counting.statements)


async def test_creates_at_once_are_one_statement_each_with_its_own_outcome(
    storage: PgSegmentStorage, counting: Counting, db: Database
) -> None:
    await storage.create_segment(PARENTS[0], "stream", 0, 0, 0)
    counting.statements.clear()
    outcomes = await asyncio.gather(
        storage.create_segment(PARENTS[1], "stream", 1, 10, 1024),
        storage.create_segment(PARENTS[0], "stream", 0, 0, 0),  # exists already
        storage.create_segment(PARENTS[2], "stream", 0, 0, 0),
        storage.create_segment(PARENTS[1], "transaction", 0, 0, 0),  # asked twice at once
        return_exceptions=True,
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], SegmentAlreadyExists) and isinstance(outcomes[3], SegmentAlreadyExists)
    assert len(counting.statements) == 1 and named(counting, "Several creates") == 1
    row = await db.fetchrow(
        "SELECT kind, scale_type, target_rate, rollover_size_bytes FROM embedded_segments WHERE name = $1",
        PARENTS[1],
    )
    assert row is not None and tuple(row) == ("stream", 1, 10, 1024)


async def test_a_failing_create_batch_falls_back_to_one_create_each(
    storage: PgSegmentStorage, counting: Counting
) -> None:
    # A scale type beyond smallint fails the batch statement: the other create still succeeds.
    outcomes = await asyncio.gather(
        storage.create_segment(PARENTS[0], "stream", 1 << 20, 0, 0),
        storage.create_segment(PARENTS[1], "stream", 0, 0, 0),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], Exception) and outcomes[1] is None
    assert (await storage.segment_state(PARENTS[1])).kind == "stream"


async def setup_txns(s: PgSegmentStorage, txns: int) -> None:
    for parent in PARENTS:
        await s.create_segment(parent, "stream", 0, 0, 0)
        await s.append(AppendRequest(parent, 1, b"head-", 1, 1))
        for t in range(txns):
            await s.create_segment(parent + TXN.format(t), "transaction", 0, 0, 0)
            await s.append(AppendRequest(parent + TXN.format(t), 2, f"t{t}".encode(), 1, 1))


async def test_merges_into_several_targets_at_once_are_one_transaction(
    storage: PgSegmentStorage, counting: Counting
) -> None:
    await setup_txns(storage, 2)
    counting.statements.clear()
    sources = [[p + TXN.format(0), p + TXN.format(1)] for p in PARENTS]
    results = await asyncio.gather(*(storage.merge(p, s, []) for p, s in zip(PARENTS, sources, strict=True)))
    assert results == [[7, 9]] * 3
    # One transaction block (its statements run on its connection) and nothing else.
    assert counting.statements == ["BEGIN"]
    for parent in PARENTS:
        state = await storage.segment_state(parent)
        assert (await storage.read(parent, 0, 100)).data == b"head-t0t1" and state.length == 9
    for source in (s for pair in sources for s in pair):
        with pytest.raises(NoSuchSegment):
            await storage.segment_state(source)
    # Asked again (a resumed commit): the lengths, nothing merged twice.
    again = await asyncio.gather(*(storage.merge(p, s, []) for p, s in zip(PARENTS, sources, strict=True)))
    assert again == [[9, 9]] * 3


async def test_a_refused_merge_among_several_refuses_only_itself(storage: PgSegmentStorage) -> None:
    await setup_txns(storage, 1)
    await storage.seal(PARENTS[1])
    outcomes = await asyncio.gather(
        *(storage.merge(p, [p + TXN.format(0)], []) for p in PARENTS), return_exceptions=True
    )
    assert outcomes[0] == [7] and outcomes[2] == [7]
    assert isinstance(outcomes[1], SegmentSealed)
    # The refused one changed nothing: its source is still there, its target as it was.
    assert (await storage.segment_state(PARENTS[1] + TXN.format(0))).length == 2
    assert (await storage.read(PARENTS[1], 0, 100)).data == b"head-"
    assert (await storage.read(PARENTS[2], 0, 100)).data == b"head-t0"


async def test_overlapping_merges_at_once_run_one_by_one(
    storage: PgSegmentStorage, counting: Counting
) -> None:
    await setup_txns(storage, 2)
    counting.statements.clear()
    target = PARENTS[0]
    outcomes = await asyncio.gather(
        storage.merge(target, [target + TXN.format(0)], []),
        storage.merge(target, [target + TXN.format(1)], []),
    )
    assert sorted(outcomes) == [[7], [9]]
    assert counting.statements == ["BEGIN", "BEGIN"]
    data = (await storage.read(target, 0, 100)).data
    assert data in (b"head-t0t1", b"head-t1t0")
