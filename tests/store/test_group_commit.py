"""Group commit of appends (app/store/group_commit.py through PgSegmentStorage.append) against the
suite's PostgreSQL: appends asked for together share transactions, each caller gets the outcome it
would have had alone, in order, and a refusal in a group changes nothing else of it."""

from __future__ import annotations

import asyncio
import struct

import pytest

from app.segmentstore.storage import (
    NULL_ATTRIBUTE_VALUE,
    AppendRequest,
    AppendResult,
    ConditionalCheckFailed,
    NoSuchSegment,
    SegmentSealed,
)
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from app.testing.clock import ManualClock

SEGMENTS = [f"scope/stream/{n}.#epoch.0" for n in range(4)]
SEALED = "scope/stream/sealed.#epoch.0"
WRITERS = 8
BLOCKS = 40


@pytest.fixture
async def storage(db: Database) -> PgSegmentStorage:
    storage = PgSegmentStorage(db, ManualClock(5_000))
    for name in [*SEGMENTS, SEALED]:
        await storage.create_segment(name, "stream", 0, 0, 0)
    await storage.seal(SEALED)
    return storage


async def _transactions_of(db: Database, segments: list[str]) -> int:
    """The transactions that wrote the segments' bytes: their chunks' distinct xmin."""
    return int(
        await db.fetchval(
            "SELECT count(DISTINCT xmin::text) FROM segment_chunks WHERE segment = ANY($1::text[])", segments
        )
    )


def _block(writer: int, k: int) -> bytes:
    filler = b"x" * (k % 13)
    return struct.pack(">HHI", writer, k, len(filler)) + filler


def _parsed(data: bytes) -> list[tuple[int, int]]:
    """(writer, k) of each block in the segment's bytes, in order."""
    blocks = []
    at = 0
    while at < len(data):
        writer, k, size = struct.unpack_from(">HHI", data, at)
        blocks.append((writer, k))
        at += 8 + size
    return blocks


async def test_appends_asked_together_share_transactions_and_keep_each_writers_order(
    storage: PgSegmentStorage, db: Database
) -> None:
    async def writer(n: int) -> list[AppendResult]:
        segment = SEGMENTS[n % len(SEGMENTS)]
        # A writer's blocks asked one after another without waiting for their acks, as a connection
        # does, a loop turn apart: groups form while the one before is being committed.
        asked = []
        for k in range(BLOCKS):
            request = AppendRequest(segment, n + 1, _block(n, k), k + 1, 1)
            asked.append(asyncio.ensure_future(storage.append(request)))
            await asyncio.sleep(0)
        return list(await asyncio.gather(*asked))

    before = storage._appends.groups
    results = await asyncio.gather(*(writer(n) for n in range(WRITERS)))
    groups = storage._appends.groups - before
    transactions = await _transactions_of(db, SEGMENTS)
    appends = WRITERS * BLOCKS
    print(f"{appends} appends in {groups} groups, written by {transactions} transactions")
    # One transaction per group: far fewer than one per append.
    assert 1 < groups <= appends // 4, (groups, appends)
    assert transactions <= groups, (transactions, groups)
    for answers in results:
        assert [a.event_number for a in answers] == list(range(1, BLOCKS + 1))
        assert not any(a.duplicate for a in answers)
    # Each segment holds each of its writers' blocks whole and in that writer's order.
    for index, segment in enumerate(SEGMENTS):
        state = await storage.segment_state(segment)
        blocks = _parsed((await storage.read(segment, 0, state.length)).data)
        for n in range(index, WRITERS, len(SEGMENTS)):
            assert [k for w, k in blocks if w == n] == list(range(BLOCKS)), n


async def test_a_refused_append_is_refused_alone_and_the_rest_of_its_group_commits(
    storage: PgSegmentStorage, db: Database
) -> None:
    ok = SEGMENTS[0]
    asked = [
        storage.append(AppendRequest(ok, 1, b"a" * 5, 1, 1)),
        storage.append(AppendRequest(SEALED, 2, b"b" * 5, 1, 1)),
        storage.append(AppendRequest(ok, 1, b"c" * 5, 2, 1, 999)),  # wrong expected offset
        storage.append(AppendRequest("scope/stream/missing.#epoch.0", 3, b"d", 1, 1)),
        storage.append(AppendRequest(ok, 1, b"a" * 5, 1, 1)),  # the first one again: a duplicate
        storage.append(AppendRequest(ok, 1, b"e" * 5, 3, 1, 5)),  # conditional, right offset
    ]
    before = storage._appends.groups
    outcomes = await asyncio.gather(*asked, return_exceptions=True)
    assert storage._appends.groups - before == 1, "the six appends were one group"
    assert outcomes[0] == AppendResult(5, 1, NULL_ATTRIBUTE_VALUE, False)
    assert isinstance(outcomes[1], SegmentSealed)
    assert isinstance(outcomes[2], ConditionalCheckFailed)
    assert isinstance(outcomes[3], NoSuchSegment)
    assert isinstance(outcomes[4], AppendResult) and outcomes[4].duplicate
    assert outcomes[5] == AppendResult(10, 3, 1, False)
    assert (await storage.read(ok, 0, 100)).data == b"aaaaaeeeee"
    assert (await storage.segment_state(SEALED)).length == 0


async def test_a_group_whose_transaction_fails_commits_nothing_and_each_append_runs_alone_in_order(
    db: Database,
) -> None:
    failures = 0

    async def fail_once(appends: str) -> None:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("the group fails before it is sent")

    storage = PgSegmentStorage(db, ManualClock(5_000), before_group_commit=fail_once)
    for name in [*SEGMENTS, SEALED]:
        await storage.create_segment(name, "stream", 0, 0, 0)
    await storage.seal(SEALED)
    ok = SEGMENTS[1]
    outcomes = await asyncio.gather(
        storage.append(AppendRequest(ok, 1, b"a" * 4, 1, 1)),
        storage.append(AppendRequest(SEALED, 2, b"b", 1, 1)),
        storage.append(AppendRequest(ok, 1, b"c" * 4, 2, 1, 4)),
        storage.append(AppendRequest(ok, 1, b"a" * 4, 1, 1)),
        return_exceptions=True,
    )
    assert failures == 1
    # Run alone, in order, after the group rolled back: the same outcomes as in a group.
    assert outcomes[0] == AppendResult(4, 1, NULL_ATTRIBUTE_VALUE, False)
    assert isinstance(outcomes[1], SegmentSealed)
    assert outcomes[2] == AppendResult(8, 2, 1, False)
    assert isinstance(outcomes[3], AppendResult) and outcomes[3].duplicate
    assert (await storage.read(ok, 0, 100)).data == b"aaaacccc"


async def test_an_error_inside_postgresql_rolls_back_the_whole_pipelined_group(
    storage: PgSegmentStorage, db: Database
) -> None:
    """A group's statements are one implicit transaction (no BEGIN or COMMIT of ours): a
    statement failing after others ran must undo theirs too, and each append then runs alone."""
    ok, other = SEGMENTS[0], SEGMENTS[1]
    await db.execute("CREATE SEQUENCE chunk_inserts")
    await db.execute(
        """CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM nextval('chunk_inserts');  -- not transactional: counts rolled-back inserts too
            IF NEW.data = 'boom'::bytea THEN RAISE EXCEPTION 'a chunk the test refuses'; END IF;
            RETURN NEW;
        END $$"""
    )
    await db.execute(
        "CREATE TRIGGER refuse_boom BEFORE INSERT ON segment_chunks"
        " FOR EACH ROW EXECUTE FUNCTION refuse_boom()"
    )
    try:
        outcomes = await asyncio.gather(
            storage.append(AppendRequest(ok, 1, b"a" * 4, 1, 1)),
            storage.append(AppendRequest(other, 2, b"boom", 1, 1)),
            storage.append(AppendRequest(ok, 1, b"c" * 4, 2, 1)),
            return_exceptions=True,
        )
        # In the group: "aaaa" inserted, "boom" refused, "cccc" never run; then alone, all three.
        assert await db.fetchval("SELECT last_value FROM chunk_inserts") == 5
    finally:
        await db.execute("DROP TRIGGER refuse_boom ON segment_chunks")
        await db.execute("DROP FUNCTION refuse_boom()")
        await db.execute("DROP SEQUENCE chunk_inserts")
    assert outcomes[0] == AppendResult(4, 1, NULL_ATTRIBUTE_VALUE, False)
    assert isinstance(outcomes[1], Exception) and "refuses" in str(outcomes[1].__cause__ or outcomes[1])
    assert outcomes[2] == AppendResult(8, 2, 1, False)
    assert (await storage.read(ok, 0, 100)).data == b"aaaacccc"
    assert (await storage.segment_state(other)).length == 0
    assert await _transactions_of(db, [ok]) == 2


async def test_a_writers_number_waits_for_this_stores_appends_to_its_segment_and_no_others(
    db: Database,
) -> None:
    """A writer set up again (a new connection) while its appends are still in a group of this
    store: its number is read once that group ended, so it includes them; a writer set up on
    another segment meanwhile is answered at once, not after that group."""
    sending = asyncio.Event()
    release = asyncio.Event()

    async def park(appends: str) -> None:
        sending.set()
        await release.wait()

    storage = PgSegmentStorage(db, ManualClock(5_000), before_group_commit=park)
    for name in SEGMENTS:
        await storage.create_segment(name, "stream", 0, 0, 0)
    busy, idle = SEGMENTS[0], SEGMENTS[2]
    in_flight = asyncio.gather(
        storage.append(AppendRequest(busy, 1, b"a" * 4, 3, 3)),
        storage.append(AppendRequest(SEGMENTS[1], 1, b"b", 1, 1)),
    )
    await asyncio.wait_for(sending.wait(), 5)
    assert await asyncio.wait_for(storage.writer_event_number(idle, 1), 2) == NULL_ATTRIBUTE_VALUE
    of_busy = asyncio.create_task(storage.writer_event_number(busy, 1))
    await asyncio.sleep(0.3)
    assert not of_busy.done()
    release.set()
    await asyncio.wait_for(in_flight, 5)
    assert await asyncio.wait_for(of_busy, 5) == 3
