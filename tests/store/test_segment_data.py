"""PgSegmentStorage's stream side against the suite's PostgreSQL: segments, appends with their
de-duplication and conditions, reads, seals, truncations, deletions, attributes and merges.

Every refusal is checked to have changed nothing; the races are forced with real concurrent
transactions on separate pooled connections.
"""

from __future__ import annotations

import asyncio

import pytest

from app.segmentstore.storage import (
    NULL_ATTRIBUTE_VALUE,
    AppendRequest,
    AppendResult,
    AttributeCheckFailed,
    AttributeUpdate,
    ConditionalCheckFailed,
    NoSuchSegment,
    OffsetBeyondEnd,
    SegmentAlreadyExists,
    SegmentSealed,
    SegmentState,
    SegmentTruncated,
    WrongSegmentKind,
)
from app.store.db import Database
from app.store.pool import create_pool
from app.store.segment_data import (
    ACCUMULATE,
    REPLACE,
    REPLACE_IF_EQUALS,
    REPLACE_IF_GREATER,
    PgSegmentStorage,
    attribute_uuid,
)
from app.testing.clock import ManualClock

SEG = "scope/stream/0.#epoch.0"
TXN = SEG + "#transaction.00000000000000000000000000000001"
TXN2 = SEG + "#transaction.00000000000000000000000000000002"
TABLE = "scope/_kvt/0.#epoch.0"
W1 = 0x0123456789ABCDEF0123456789ABCDEF
W2 = 7
ATTR = 0xFFFF_0000_0000_0000_0000_0000_0000_0001


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(5_000)


@pytest.fixture
def storage(db: Database, clock: ManualClock) -> PgSegmentStorage:
    return PgSegmentStorage(db, clock)


async def create(s: PgSegmentStorage, name: str = SEG, kind: str = "stream") -> None:
    await s.create_segment(name, kind, 1, 10, 1024)  # type: ignore[arg-type]


async def write(
    s: PgSegmentStorage, data: bytes, n: int, *, name: str = SEG, writer: int = W1
) -> AppendResult:
    return await s.append(AppendRequest(name, writer, data, n, 1))


async def content(s: PgSegmentStorage, name: str = SEG) -> bytes:
    state = await s.segment_state(name)
    result = await s.read(name, state.start_offset, 1 << 30)
    return result.data


async def counts(db: Database, name: str) -> tuple[int, int]:
    chunks = await db.fetchval("SELECT count(*) FROM segment_chunks WHERE segment = $1", name)
    attributes = await db.fetchval("SELECT count(*) FROM segment_attributes WHERE segment = $1", name)
    return int(chunks), int(attributes)


# --- create, state, delete ------------------------------------------------------------------


async def test_create_and_state(storage: PgSegmentStorage, db: Database, clock: ManualClock) -> None:
    await create(storage)
    assert await storage.segment_state(SEG) == SegmentState(SEG, "stream", 0, 0, False, 5_000, 1, 10)
    row = await db.fetchrow(
        "SELECT scale_type, target_rate, rollover_size_bytes FROM embedded_segments WHERE name = $1", SEG
    )
    assert row is not None and tuple(row) == (1, 10, 1024)
    with pytest.raises(SegmentAlreadyExists):
        await create(storage)
    await storage.create_table(TABLE, 0, 0)
    with pytest.raises(SegmentAlreadyExists):
        await create(storage, TABLE)
    await create(storage, "scope/big/0.#transient.x", "transient")
    assert (await storage.segment_state("scope/big/0.#transient.x")).kind == "transient"
    clock.advance(10)
    await write(storage, b"abc", 1)
    assert (await storage.segment_state(SEG)).last_modified_ms == 5_010


async def test_missing_segment_everywhere(storage: PgSegmentStorage) -> None:
    for call in (
        storage.segment_state(SEG),
        storage.writer_event_number(SEG, W1),
        write(storage, b"x", 1),
        storage.read(SEG, 0, 10),
        storage.seal(SEG),
        storage.truncate(SEG, 0),
        storage.delete(SEG),
        storage.update_policy(SEG, 0, 0),
        storage.get_attribute(SEG, ATTR),
        storage.update_attribute(SEG, ATTR, 1, NULL_ATTRIBUTE_VALUE),
        storage.merge(SEG, [TXN], []),
    ):
        with pytest.raises(NoSuchSegment) as caught:
            await call
        assert caught.value.segment == SEG


async def test_stream_operations_on_a_table_are_refused(storage: PgSegmentStorage) -> None:
    await storage.create_table(TABLE, 0, 0)
    await create(storage)
    for call in (
        write(storage, b"x", 1, name=TABLE),
        storage.read(TABLE, 0, 10),
        storage.seal(TABLE),
        storage.truncate(TABLE, 0),
        storage.merge(TABLE, [SEG], []),
    ):
        with pytest.raises(WrongSegmentKind):
            await call
    await create(storage, TXN, "transaction")
    await storage.update_table(TABLE, [], -1)
    with pytest.raises(WrongSegmentKind):
        await storage.merge(SEG, [TABLE], [])
    assert await storage.segment_state(SEG) == SegmentState(SEG, "stream", 0, 0, False, 5_000, 1, 10)


async def test_delete_removes_data_attributes_and_transaction_segments(
    storage: PgSegmentStorage, db: Database
) -> None:
    await create(storage)
    await create(storage, TXN, "transaction")
    other = "scope/stream/0.#epoch.00"  # shares a prefix, is no child
    await create(storage, other)
    await write(storage, b"hello", 3)
    await write(storage, b"txn", 1, name=TXN)
    assert await storage.update_attribute(SEG, ATTR, 9, NULL_ATTRIBUTE_VALUE)
    await storage.delete(SEG)
    for name in (SEG, TXN):
        with pytest.raises(NoSuchSegment):
            await storage.segment_state(name)
        assert await counts(db, name) == (0, 0)
    assert (await storage.segment_state(other)).length == 0
    with pytest.raises(NoSuchSegment):
        await storage.delete(SEG)
    # Re-created: empty, no stale attributes or writer numbers.
    await create(storage)
    assert await storage.segment_state(SEG) == SegmentState(SEG, "stream", 0, 0, False, 5_000, 1, 10)
    assert await storage.get_attribute(SEG, ATTR) == NULL_ATTRIBUTE_VALUE
    assert await storage.writer_event_number(SEG, W1) == NULL_ATTRIBUTE_VALUE
    assert (await storage.read(SEG, 0, 100)).data == b""


async def test_update_policy(storage: PgSegmentStorage, db: Database) -> None:
    await create(storage)
    await storage.update_policy(SEG, 2, 77)
    row = await db.fetchrow("SELECT scale_type, target_rate FROM embedded_segments WHERE name = $1", SEG)
    assert row is not None and tuple(row) == (2, 77)
    # What a store's auto-scaler reads back for a segment it did not create.
    state = await storage.segment_state(SEG)
    assert (state.scale_type, state.target_rate) == (2, 77)


# --- appends --------------------------------------------------------------------------------


async def test_append_and_dedup(storage: PgSegmentStorage) -> None:
    await create(storage)
    assert await storage.writer_event_number(SEG, W1) == NULL_ATTRIBUTE_VALUE
    assert await write(storage, b"aaaa", 2) == AppendResult(4, 2, NULL_ATTRIBUTE_VALUE, False)
    assert await write(storage, b"bb", 5) == AppendResult(6, 5, 2, False)
    # A resent block (number at or below the stored one) appends nothing.
    assert await write(storage, b"bb", 5) == AppendResult(6, 5, 5, True)
    assert await write(storage, b"zz", 3) == AppendResult(6, 3, 5, True)
    assert await storage.writer_event_number(SEG, W1) == 5
    # Another writer has its own number.
    assert await write(storage, b"c", 1, writer=W2) == AppendResult(7, 1, NULL_ATTRIBUTE_VALUE, False)
    assert await content(storage) == b"aaaabbc"
    assert await storage.writer_event_number(SEG, W2) == 1


async def test_a_writers_number_is_read_after_the_appends_in_flight_on_the_segment(
    storage: PgSegmentStorage, db: Database
) -> None:
    """Another store's append still committing (its transaction holds the segment's row and has
    moved the writer's number on): the number is read once it has ended, and includes it."""
    await create(storage)
    await write(storage, b"aaaa", 2)
    async with db.transaction() as conn:
        await conn.execute("SELECT 1 FROM embedded_segments WHERE name = $1 FOR UPDATE", SEG)
        await conn.execute(
            "UPDATE segment_attributes SET value = 9 WHERE segment = $1 AND attribute_id = $2",
            SEG,
            attribute_uuid(W1),
        )
        reading = asyncio.create_task(storage.writer_event_number(SEG, W1))
        await asyncio.sleep(0.3)
        assert not reading.done()
    assert await asyncio.wait_for(reading, 5) == 9


async def test_append_to_sealed_segment_is_refused(storage: PgSegmentStorage) -> None:
    await create(storage)
    await write(storage, b"abc", 1)
    assert await storage.seal(SEG) == 3
    with pytest.raises(SegmentSealed):
        await write(storage, b"more", 2)
    # Sealed wins over a wrong expected offset, and a duplicate is refused too.
    with pytest.raises(SegmentSealed):
        await storage.append(AppendRequest(SEG, W1, b"x", 2, 1, 99))
    with pytest.raises(SegmentSealed):
        await write(storage, b"abc", 1)
    assert await storage.writer_event_number(SEG, W1) == 1
    assert await content(storage) == b"abc"


async def test_conditional_append(storage: PgSegmentStorage) -> None:
    await create(storage)
    assert (await storage.append(AppendRequest(SEG, W1, b"12345", 1, 1, 0))).length == 5
    with pytest.raises(ConditionalCheckFailed):
        await storage.append(AppendRequest(SEG, W1, b"xx", 2, 1, 4))
    # Nothing changed: the same event number succeeds at the right offset.
    assert await storage.writer_event_number(SEG, W1) == 1
    assert await storage.append(AppendRequest(SEG, W1, b"67", 2, 1, 5)) == AppendResult(7, 2, 1, False)
    assert await content(storage) == b"1234567"


async def test_the_after_append_hook_runs_once_an_append_is_stored_and_not_for_a_refusal(
    db: Database, clock: ManualClock
) -> None:
    seen: list[bytes] = []
    described: list[str] = []

    async def after_append(appends: str) -> None:
        seen.append(await content(PgSegmentStorage(db, clock)))
        described.append(appends)

    storage = PgSegmentStorage(db, clock, after_append)
    await create(storage)
    await write(storage, b"abc", 1)
    await write(storage, b"abc", 1)  # a duplicate is answered, so it passes the hook too
    with pytest.raises(ConditionalCheckFailed):
        await storage.append(AppendRequest(SEG, W1, b"x", 2, 1, 0))
    assert seen == [b"abc", b"abc"]
    assert described == ["1 appends of 1 writers on 1 segments (at most 1 writers on one)"] * 2


async def test_empty_append_advances_the_writer_only(storage: PgSegmentStorage) -> None:
    await create(storage)
    assert await write(storage, b"", 1) == AppendResult(0, 1, NULL_ATTRIBUTE_VALUE, False)
    assert await write(storage, b"ab", 2) == AppendResult(2, 2, 1, False)
    assert await content(storage) == b"ab"


async def test_two_appenders_interleave_whole_blocks(storage: PgSegmentStorage) -> None:
    await create(storage)
    blocks = 40

    async def writer(wid: int, fill: bytes) -> None:
        for n in range(1, blocks + 1):
            await write(storage, fill * (100 + n), n, writer=wid)

    await asyncio.gather(writer(W1, b"a"), writer(W2, b"b"))
    data = await content(storage)
    runs: dict[bytes, list[int]] = {b"a": [], b"b": []}
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i]:
            j += 1
        runs[data[i : i + 1]].append(j - i)
        i = j
    # Each writer's bytes come in its blocks' sizes, in order: two blocks of one writer may
    # touch (one run), never a block split by the other writer.
    for fill in (b"a", b"b"):
        sizes = iter(range(101, 101 + blocks))
        for run in runs[fill]:
            total = 0
            while total < run:
                total += next(sizes)
            assert total == run
    assert await storage.writer_event_number(SEG, W1) == blocks
    assert await storage.writer_event_number(SEG, W2) == blocks


async def test_same_writer_racing_with_itself_stores_a_block_once(storage: PgSegmentStorage) -> None:
    await create(storage)
    results = await asyncio.gather(*(write(storage, b"block", 1) for _ in range(6)))
    assert sorted(r.duplicate for r in results) == [False] + [True] * 5
    assert await content(storage) == b"block"


async def test_append_is_durable_across_a_pool_reopen(db_url: str, clock: ManualClock) -> None:
    first = await create_pool(db_url, min_size=1, max_size=2)
    try:
        s = PgSegmentStorage(first, clock)
        await create(s)
        await write(s, b"durable", 4)
    finally:
        await first.close()
    second = await create_pool(db_url, min_size=1, max_size=2)
    try:
        s = PgSegmentStorage(second, clock)
        assert await s.writer_event_number(SEG, W1) == 4
        assert await content(s) == b"durable"
    finally:
        await second.close()


# --- reads, seal, truncate ------------------------------------------------------------------


async def test_reads_across_chunk_boundaries(storage: PgSegmentStorage) -> None:
    await create(storage)
    pieces = [b"0123", b"45", b"6789ab", b"c", b"defghij"]
    for n, piece in enumerate(pieces, 1):
        await write(storage, piece, n)
    whole = b"".join(pieces)
    for offset in range(len(whole) + 1):
        for size in (0, 1, 2, 3, 5, 8, 100):
            result = await storage.read(SEG, offset, size)
            assert result.data == whole[offset : offset + size], (offset, size)
            assert (result.offset, result.length, result.start_offset, result.sealed) == (
                offset,
                len(whole),
                0,
                False,
            )


async def test_read_at_and_past_the_end(storage: PgSegmentStorage) -> None:
    await create(storage)
    await write(storage, b"abc", 1)
    assert (await storage.read(SEG, 3, 10)).data == b""
    assert (await storage.read(SEG, 9, 10)).data == b""  # unsealed: the caller waits
    await storage.seal(SEG)
    end = await storage.read(SEG, 3, 10)
    assert (end.data, end.sealed, end.length) == (b"", True, 3)
    with pytest.raises(OffsetBeyondEnd):
        await storage.read(SEG, 4, 10)


async def test_seal_twice(storage: PgSegmentStorage) -> None:
    await create(storage)
    await write(storage, b"ab", 1)
    assert await storage.seal(SEG) == 2
    with pytest.raises(SegmentSealed):
        await storage.seal(SEG)
    assert (await storage.segment_state(SEG)).sealed


async def test_truncate_and_read_after_it(storage: PgSegmentStorage, db: Database) -> None:
    await create(storage)
    for n, piece in enumerate([b"aaaa", b"bbbb", b"cccc"], 1):
        await write(storage, piece, n)
    await storage.truncate(SEG, 0)  # at the start: fine
    await storage.truncate(SEG, 6)
    assert (await storage.segment_state(SEG)).start_offset == 6
    # The chunk wholly below 6 is gone; the one holding 6 stays.
    assert await counts(db, SEG) == (2, 1)
    assert (await storage.read(SEG, 6, 100)).data == b"bbcccc"
    with pytest.raises(SegmentTruncated) as below:
        await storage.read(SEG, 5, 10)
    assert below.value.start_offset == 6
    for bad in (5, 13):
        with pytest.raises(SegmentTruncated):
            await storage.truncate(SEG, bad)
    assert (await storage.segment_state(SEG)).start_offset == 6
    await storage.seal(SEG)
    await storage.truncate(SEG, 12)  # allowed on a sealed segment, up to the end
    state = await storage.segment_state(SEG)
    assert (state.start_offset, state.length) == (12, 12)
    assert await counts(db, SEG) == (0, 1)
    assert (await storage.read(SEG, 12, 10)).data == b""


# --- attributes -----------------------------------------------------------------------------


async def test_attribute_compare_and_set(storage: PgSegmentStorage) -> None:
    await create(storage)
    assert await storage.get_attribute(SEG, ATTR) == NULL_ATTRIBUTE_VALUE
    assert not await storage.update_attribute(SEG, ATTR, 5, 4)
    assert await storage.update_attribute(SEG, ATTR, 5, NULL_ATTRIBUTE_VALUE)
    assert not await storage.update_attribute(SEG, ATTR, 6, NULL_ATTRIBUTE_VALUE)
    assert await storage.get_attribute(SEG, ATTR) == 5
    assert await storage.update_attribute(SEG, ATTR, 6, 5)
    assert await storage.get_attribute(SEG, ATTR) == 6
    # Setting the null value removes it.
    assert await storage.update_attribute(SEG, ATTR, NULL_ATTRIBUTE_VALUE, 6)
    assert await storage.get_attribute(SEG, ATTR) == NULL_ATTRIBUTE_VALUE
    assert await storage.update_attribute(SEG, ATTR, 1, NULL_ATTRIBUTE_VALUE)


async def test_concurrent_attribute_cas_has_one_winner(storage: PgSegmentStorage) -> None:
    await create(storage)
    won = await asyncio.gather(
        *(storage.update_attribute(SEG, ATTR, v, NULL_ATTRIBUTE_VALUE) for v in range(5))
    )
    assert sorted(won) == [False] * 4 + [True]
    assert await storage.get_attribute(SEG, ATTR) == won.index(True)


# --- merge ----------------------------------------------------------------------------------


async def setup_merge(s: PgSegmentStorage) -> None:
    await create(s)
    await write(s, b"base", 1)
    await create(s, TXN, "transaction")
    await write(s, b"txn1-", 1, name=TXN)
    await write(s, b"more", 2, name=TXN)
    await create(s, TXN2, "transaction")
    await write(s, b"second", 1, name=TXN2, writer=W2)


async def test_merge_several_sources(storage: PgSegmentStorage, db: Database) -> None:
    await setup_merge(storage)
    assert await storage.merge(SEG, [TXN, TXN2], []) == [13, 19]
    assert await content(storage) == b"basetxn1-moresecond"
    for name in (TXN, TXN2):
        with pytest.raises(NoSuchSegment):
            await storage.segment_state(name)
        assert await counts(db, name) == (0, 0)
    # Source writer numbers are not copied to the target.
    assert await storage.writer_event_number(SEG, W1) == 1
    assert await storage.writer_event_number(SEG, W2) == NULL_ATTRIBUTE_VALUE
    # Reads slice moved chunks like any other.
    assert (await storage.read(SEG, 6, 6)).data == b"n1-mor"
    # A re-merge (sources gone) answers the target's length, even after a seal.
    assert await storage.merge(SEG, [TXN, TXN2], []) == [19, 19]
    await storage.seal(SEG)
    assert await storage.merge(SEG, [TXN], [AttributeUpdate(ATTR, REPLACE_IF_EQUALS, 1, 99)]) == [19]


async def test_merge_empty_source_and_missing_source(storage: PgSegmentStorage) -> None:
    await setup_merge(storage)
    empty = SEG + "#transaction.00000000000000000000000000000003"
    await create(storage, empty, "transaction")
    assert await storage.merge(SEG, [empty, "gone", TXN2], []) == [4, 4, 10]
    with pytest.raises(NoSuchSegment):
        await storage.segment_state(empty)
    assert await content(storage) == b"basesecond"
    # The merged-in chunk keeps appends after it in order.
    await write(storage, b"!", 2)
    assert await content(storage) == b"basesecond!"


async def test_merge_seals_an_unsealed_source_against_writers(storage: PgSegmentStorage) -> None:
    await setup_merge(storage)
    await storage.merge(SEG, [TXN], [])
    with pytest.raises(NoSuchSegment):
        await write(storage, b"late", 3, name=TXN)


async def test_merge_refusals_change_nothing(storage: PgSegmentStorage, db: Database) -> None:
    await setup_merge(storage)
    before = await content(storage)
    await storage.truncate(TXN2, 1)
    with pytest.raises(SegmentTruncated) as truncated:
        await storage.merge(SEG, [TXN, TXN2], [])
    assert truncated.value.segment == TXN2
    assert (await storage.segment_state(TXN)).length == 9
    assert await content(storage) == before
    with pytest.raises(NoSuchSegment):
        await storage.merge("nope", [TXN], [])
    await storage.seal(SEG)
    with pytest.raises(SegmentSealed):
        await storage.merge(SEG, [TXN], [])
    assert (await storage.segment_state(TXN)).length == 9
    assert await counts(db, TXN) == (2, 1)


async def test_merge_attribute_updates(storage: PgSegmentStorage) -> None:
    await setup_merge(storage)
    other = ATTR + 1
    assert await storage.update_attribute(SEG, ATTR, 10, NULL_ATTRIBUTE_VALUE)
    failing = [AttributeUpdate(other, REPLACE, 1, 0), AttributeUpdate(ATTR, REPLACE_IF_EQUALS, 11, 9)]
    with pytest.raises(AttributeCheckFailed):
        await storage.merge(SEG, [TXN], failing)
    assert await content(storage) == b"base"
    assert (await storage.segment_state(TXN)).length == 9
    assert await storage.get_attribute(SEG, other) == NULL_ATTRIBUTE_VALUE
    passing = [
        AttributeUpdate(ATTR, REPLACE_IF_EQUALS, 11, 10),
        AttributeUpdate(other, ACCUMULATE, 3, 0),
        AttributeUpdate(other, ACCUMULATE, 4, 0),
    ]
    assert await storage.merge(SEG, [TXN], passing) == [13]
    assert await storage.get_attribute(SEG, ATTR) == 11
    assert await storage.get_attribute(SEG, other) == 7
    with pytest.raises(AttributeCheckFailed):
        await storage.merge(SEG, [TXN2], [AttributeUpdate(ATTR, REPLACE_IF_GREATER, 11, 0)])
    assert await storage.merge(SEG, [TXN2], [AttributeUpdate(ATTR, REPLACE_IF_GREATER, 12, 0)]) == [19]
    assert await storage.get_attribute(SEG, ATTR) == 12


async def test_concurrent_merges_of_one_source_merge_once(storage: PgSegmentStorage) -> None:
    await setup_merge(storage)
    results = await asyncio.gather(*(storage.merge(SEG, [TXN], []) for _ in range(4)))
    assert results == [[13]] * 4
    assert await content(storage) == b"basetxn1-more"


async def test_merge_racing_appends_keeps_blocks_whole(storage: PgSegmentStorage) -> None:
    await setup_merge(storage)

    async def appends() -> None:
        for n in range(2, 30):
            await write(storage, b"w" * 7, n)

    await asyncio.gather(appends(), storage.merge(SEG, [TXN], []))
    data = await content(storage)
    assert data.startswith(b"base")
    assert data.count(b"txn1-more") == 1
    assert data.replace(b"txn1-more", b"") == b"base" + b"w" * 7 * 28
    offset = data.index(b"txn1-more")
    assert (offset - 4) % 7 == 0


async def test_delete_racing_merges_and_appends(storage: PgSegmentStorage) -> None:
    # Each of the merge and the append either happened before the delete or found the segment
    # gone; the delete always removes the parent and its transaction segments.
    for _ in range(5):
        await setup_merge(storage)
        outcomes = await asyncio.gather(
            storage.merge(SEG, [TXN, TXN2], []),
            write(storage, b"x", 2),
            storage.delete(SEG),
            return_exceptions=True,
        )
        assert not isinstance(outcomes[2], BaseException)
        assert all(r is None or isinstance(r, (list, AppendResult, NoSuchSegment)) for r in outcomes), (
            outcomes
        )
        for name in (SEG, TXN, TXN2):
            with pytest.raises(NoSuchSegment):
                await storage.segment_state(name)
