"""PgSegmentStorage's table segments against the suite's PostgreSQL: the key version rules,
all-or-nothing batches, the table-length check, paging, delta reads, limits and races."""

from __future__ import annotations

import asyncio

import pytest

from app.segmentstore.storage import (
    MAX_TABLE_KEY_BYTES,
    MAX_TABLE_VALUE_BYTES,
    NO_VERSION,
    NOT_EXISTS,
    NoSuchSegment,
    SegmentAlreadyExists,
    SegmentTruncated,
    TableDelta,
    TableEntry,
    TableInfo,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableSegmentNotEmpty,
    TooLarge,
    WrongSegmentKind,
)
from app.store.db import Database
from app.store.segment_data import PgSegmentStorage
from tests.store.test_segment_data import SEG, clock, create, storage

__all__ = ["clock", "storage"]  # the fixtures this module uses (db: tests/store/conftest.py)

T = "scope/rg_kvtable/0.#epoch.0"
ANY = -1


def e(key: bytes, value: bytes = b"v", version: int = NO_VERSION) -> TableEntry:
    return TableEntry(key, value, version)


async def entries(s: PgSegmentStorage) -> dict[bytes, tuple[bytes, int]]:
    page = await s.read_table_page(T, 1000, b"", b"", b"")
    return {x.key: (x.value, x.version) for x in page.entries}


@pytest.fixture
async def table(storage: PgSegmentStorage) -> PgSegmentStorage:
    await storage.create_table(T, 0, 0)
    return storage


async def test_create_info_and_delete(storage: PgSegmentStorage) -> None:
    await storage.create_table(T, 16, 1024)
    with pytest.raises(SegmentAlreadyExists):
        await storage.create_table(T, 0, 0)
    assert await storage.table_info(T) == TableInfo(0, 0, 0, 16)
    # A fixed key length (a key-value table's layout): keys of exactly 16 bytes.
    await storage.update_table(T, [e(b"a" * 16), e(b"b" * 16)], ANY)
    assert await storage.table_info(T) == TableInfo(0, 2, 2, 16)
    with pytest.raises(TableSegmentNotEmpty):
        await storage.delete_table(T, True)
    assert (await storage.table_info(T)).entry_count == 2
    await storage.delete_table(T, False)
    with pytest.raises(NoSuchSegment):
        await storage.table_info(T)
    with pytest.raises(NoSuchSegment):
        await storage.delete_table(T, False)
    # Re-created: empty.
    await storage.create_table(T, 0, 0)
    assert await entries(storage) == {}
    await storage.delete_table(T, True)


async def test_table_operations_on_missing_and_stream_segments(storage: PgSegmentStorage) -> None:
    await create(storage)
    for name, error in ((T, NoSuchSegment), (SEG, WrongSegmentKind)):
        for call in (
            storage.update_table(name, [e(b"k")], ANY),
            storage.remove_table_keys(name, [(b"k", NO_VERSION)], ANY),
            storage.read_table(name, [b"k"]),
            storage.read_table_page(name, 10, b"", b"", b""),
            storage.read_table_delta(name, 0, 10),
            storage.table_info(name),
            storage.delete_table(name, False),
        ):
            with pytest.raises(error):
                await call
    assert (await storage.segment_state(SEG)).kind == "stream"


async def test_version_matrix_for_updates(table: PgSegmentStorage) -> None:
    assert await table.update_table(T, [e(b"k", b"1")], ANY) == [0]  # NO_VERSION on absent
    assert await table.update_table(T, [e(b"k", b"2")], ANY) == [1]  # NO_VERSION on present
    with pytest.raises(TableKeyBadVersion):
        await table.update_table(T, [e(b"k", b"x", NOT_EXISTS)], ANY)
    assert await table.update_table(T, [e(b"n", b"3", NOT_EXISTS)], ANY) == [2]
    assert await table.update_table(T, [e(b"k", b"4", 1)], ANY) == [3]
    with pytest.raises(TableKeyBadVersion):
        await table.update_table(T, [e(b"k", b"x", 1)], ANY)
    with pytest.raises(TableKeyDoesNotExist):
        await table.update_table(T, [e(b"absent", b"x", 0)], ANY)
    assert await entries(table) == {b"k": (b"4", 3), b"n": (b"3", 2)}
    assert (await table.table_info(T)).length == 4


async def test_a_version_of_an_absent_key_is_a_bad_version_in_a_fixed_key_table(
    storage: PgSegmentStorage,
) -> None:
    # Pravega's fixed-key layout (key-value tables) answers TableKeyBadVersion where its hash
    # layout answers TableKeyDoesNotExist; Pravega 0.13 standalone does so for all of these.
    await storage.create_table(T, 4, 0)
    await storage.update_table(T, [e(b"gone"), e(b"kept")], ANY)
    await storage.remove_table_keys(T, [(b"gone", NO_VERSION)], ANY)
    for batch in ([e(b"gone", b"x", 0)], [e(b"nevr", b"x", 1)], [e(b"kept", b"x", 1), e(b"nevr", b"x", 1)]):
        with pytest.raises(TableKeyBadVersion):
            await storage.update_table(T, batch, ANY)
    for keys in ([(b"gone", 0)], [(b"nevr", 5)]):
        with pytest.raises(TableKeyBadVersion):
            await storage.remove_table_keys(T, keys, ANY)
    assert await entries(storage) == {b"kept": (b"v", 1)}


async def test_a_bad_item_rejects_the_whole_batch(table: PgSegmentStorage) -> None:
    await table.update_table(T, [e(b"a", b"1")], ANY)
    batch = [e(b"new"), e(b"a", b"2", 0), e(b"b", b"x", 5)]
    with pytest.raises(TableKeyDoesNotExist):
        await table.update_table(T, batch, ANY)
    assert await entries(table) == {b"a": (b"1", 0)}
    assert (await table.table_info(T)).length == 1


async def test_versions_increase_in_input_order(table: PgSegmentStorage) -> None:
    first = await table.update_table(T, [e(b"z"), e(b"a"), e(b"m")], ANY)
    second = await table.update_table(T, [e(b"a"), e(b"q")], ANY)
    assert first == [0, 1, 2] and second == [3, 4]
    assert await entries(table) == {b"a": (b"v", 3), b"m": (b"v", 2), b"q": (b"v", 4), b"z": (b"v", 0)}


async def test_a_batch_checks_every_item_against_the_table_before_it(table: PgSegmentStorage) -> None:
    # Pravega's key index checks each item against the table as it was before the batch. The Rust
    # reader-group synchronizer relies on it: it names its map-version key once per entry it
    # inserts, every time with the same expected version.
    assert await table.update_table(T, [e(b"k", b"1", NOT_EXISTS), e(b"k", b"2", NOT_EXISTS)], ANY) == [0, 1]
    assert await entries(table) == {b"k": (b"2", 1)}
    assert await table.update_table(T, [e(b"k", b"3", 1), e(b"k", b"4", 1)], ANY) == [2, 3]
    assert await entries(table) == {b"k": (b"4", 3)}
    with pytest.raises(TableKeyDoesNotExist):
        # j is absent before the batch, whatever its first item would have written.
        await table.update_table(T, [e(b"j", b"1", NOT_EXISTS), e(b"j", b"2", 4)], ANY)
    with pytest.raises(TableKeyBadVersion):
        await table.update_table(T, [e(b"k", b"5", 3), e(b"k", b"6", 2)], ANY)
    assert await entries(table) == {b"k": (b"4", 3)}
    await table.remove_table_keys(T, [(b"k", 3), (b"k", 3)], ANY)
    assert await entries(table) == {}


async def test_removals(table: PgSegmentStorage) -> None:
    await table.update_table(T, [e(b"a"), e(b"b"), e(b"c")], ANY)
    await table.remove_table_keys(T, [(b"absent", NO_VERSION)], ANY)  # a no-op
    assert (await table.table_info(T)).length == 3
    with pytest.raises(TableKeyDoesNotExist):
        await table.remove_table_keys(T, [(b"a", NO_VERSION), (b"absent", 4)], ANY)
    with pytest.raises(TableKeyBadVersion):
        await table.remove_table_keys(T, [(b"a", NO_VERSION), (b"b", 0)], ANY)
    assert set(await entries(table)) == {b"a", b"b", b"c"}
    await table.remove_table_keys(T, [(b"a", NO_VERSION), (b"b", 1)], ANY)
    assert set(await entries(table)) == {b"c"}
    info = await table.table_info(T)
    assert (info.length, info.entry_count) == (5, 1)
    assert await table.update_table(T, [e(b"a", b"again", NOT_EXISTS)], ANY) == [5]


async def test_table_segment_offset_must_be_the_length(table: PgSegmentStorage) -> None:
    assert await table.update_table(T, [e(b"a")], 0) == [0]
    with pytest.raises(SegmentTruncated):
        await table.update_table(T, [e(b"b")], 0)
    with pytest.raises(SegmentTruncated):
        await table.remove_table_keys(T, [(b"a", NO_VERSION)], 5)
    assert await table.update_table(T, [e(b"b")], 1) == [1]
    await table.remove_table_keys(T, [(b"a", NO_VERSION)], 2)
    assert await entries(table) == {b"b": (b"v", 1)}


async def test_limits(table: PgSegmentStorage) -> None:
    big_key = b"k" * (MAX_TABLE_KEY_BYTES + 1)
    for batch in (
        [e(b"")],
        [e(b"ok"), e(big_key)],
        [e(b"ok", b"x" * (MAX_TABLE_VALUE_BYTES + 1))],
    ):
        with pytest.raises(TooLarge):
            await table.update_table(T, batch, ANY)
    with pytest.raises(TooLarge):
        await table.remove_table_keys(T, [(b"", NO_VERSION)], ANY)
    assert await entries(table) == {}
    edge = [e(b"k" * MAX_TABLE_KEY_BYTES, b"x" * MAX_TABLE_VALUE_BYTES)]
    assert await table.update_table(T, edge, ANY) == [0]
    assert (await table.read_table(T, [edge[0].key]))[0].value == edge[0].value


async def test_read_table(table: PgSegmentStorage) -> None:
    await table.update_table(T, [e(b"a", b"1"), e(b"b", b"2")], ANY)
    got = await table.read_table(T, [b"b", b"missing", b"a", b"b"])
    assert got == [e(b"b", b"2", 1), e(b"missing", b"", -1), e(b"a", b"1", 0), e(b"b", b"2", 1)]
    assert await table.read_table(T, []) == []


async def test_paging_one_at_a_time(table: PgSegmentStorage) -> None:
    keys = [bytes([i]) * 2 for i in (5, 1, 255, 0, 128)]
    await table.update_table(T, [e(k) for k in keys], ANY)
    seen: list[bytes] = []
    token = b""
    while True:
        page = await table.read_table_page(T, 1, token, b"", b"")
        if not page.entries:
            assert page.token == b""
            break
        assert len(page.entries) == 1
        seen.append(page.entries[0].key)
        token = page.token
    assert seen == sorted(keys)  # unsigned byte order


async def test_paging_is_stable_under_concurrent_updates(table: PgSegmentStorage) -> None:
    await table.update_table(T, [e(k) for k in (b"a", b"b", b"c", b"d")], ANY)
    first = await table.read_table_page(T, 2, b"", b"", b"")
    assert [x.key for x in first.entries] == [b"a", b"b"]
    await table.update_table(T, [e(b"a", b"new"), e(b"bb"), e(b"c", b"new")], ANY)
    await table.remove_table_keys(T, [(b"d", NO_VERSION)], ANY)
    second = await table.read_table_page(T, 10, first.token, b"", b"")
    assert [(x.key, x.value) for x in second.entries] == [(b"bb", b"v"), (b"c", b"new")]
    assert (await table.read_table_page(T, 10, second.token, b"", b"")).entries == []


async def test_paging_within_bounds(table: PgSegmentStorage) -> None:
    await table.update_table(T, [e(k) for k in (b"a1", b"a2", b"b1", b"b2", b"c1")], ANY)
    page = await table.read_table_page(T, 10, b"", b"a2", b"b2")
    assert [x.key for x in page.entries] == [b"a2", b"b1", b"b2"]
    page = await table.read_table_page(T, 10, b"a2", b"a1", b"")
    assert [x.key for x in page.entries] == [b"b1", b"b2", b"c1"]


async def test_a_page_stops_at_two_mebibytes(table: PgSegmentStorage) -> None:
    value = b"x" * (700 * 1024)
    await table.update_table(T, [e(k, value) for k in (b"a", b"b", b"c", b"d")], ANY)
    page = await table.read_table_page(T, 10, b"", b"", b"")
    assert [x.key for x in page.entries] == [b"a", b"b"]
    rest = await table.read_table_page(T, 10, page.token, b"", b"")
    assert [x.key for x in rest.entries] == [b"c", b"d"]


async def test_delta_reads(table: PgSegmentStorage) -> None:
    assert await table.read_table_delta(T, 0, 10) == TableDelta([], 0, True)
    await table.update_table(T, [e(b"a", b"1"), e(b"b", b"1"), e(b"c", b"1")], ANY)  # 0, 1, 2
    delta = await table.read_table_delta(T, 0, 2)
    assert delta == TableDelta([e(b"a", b"1", 0), e(b"b", b"1", 1)], 2, False)
    delta = await table.read_table_delta(T, delta.last_position, 2)
    assert delta == TableDelta([e(b"c", b"1", 2)], 3, True)
    # From the last position with nothing new: empty, the position stays.
    assert await table.read_table_delta(T, 3, 10) == TableDelta([], 3, True)
    # Re-updates collapse to the newest value; a removed key is left out.
    await table.update_table(T, [e(b"a", b"2")], ANY)  # 3
    await table.update_table(T, [e(b"a", b"3")], ANY)  # 4
    await table.remove_table_keys(T, [(b"b", NO_VERSION)], ANY)  # position 5
    await table.update_table(T, [e(b"d", b"1")], ANY)  # 6
    assert await table.read_table_delta(T, 3, 10) == TableDelta([e(b"a", b"3", 4), e(b"d", b"1", 6)], 7, True)
    assert await table.read_table_delta(T, 0, 10) == TableDelta(
        [e(b"c", b"1", 2), e(b"a", b"3", 4), e(b"d", b"1", 6)], 7, True
    )
    # Beyond the end: empty.
    assert await table.read_table_delta(T, 100, 10) == TableDelta([], 100, True)


async def test_delta_from_the_start_replays_the_whole_table(table: PgSegmentStorage) -> None:
    # What the reader-group synchronizer does: fetch until an empty batch.
    for i in range(7):
        await table.update_table(T, [e(b"k%d" % (i % 3), b"%d" % i)], ANY)
    state: dict[bytes, bytes] = {}
    position = 0
    while True:
        delta = await table.read_table_delta(T, position, 2)
        if not delta.entries:
            break
        assert delta.last_position > position
        state.update((x.key, x.value) for x in delta.entries)
        position = delta.last_position
    assert state == {b"k0": b"6", b"k1": b"4", b"k2": b"5"}


async def test_two_conditional_updates_of_one_key_one_wins(table: PgSegmentStorage, db: Database) -> None:
    await table.update_table(T, [e(b"k", b"0", NOT_EXISTS)], ANY)

    async def update(value: bytes) -> bool:
        try:
            await table.update_table(T, [e(b"k", value, 0)], ANY)
        except TableKeyBadVersion:
            return False
        return True

    for _ in range(3):
        version = (await table.read_table(T, [b"k"]))[0].version
        results = await asyncio.gather(
            *(table.update_table(T, [e(b"k", b"%d" % i, version)], ANY) for i in range(4)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, list)]
        assert len(winners) == 1
        assert all(isinstance(r, TableKeyBadVersion) for r in results if not isinstance(r, list))
        assert (await table.read_table(T, [b"k"]))[0].version == winners[0][0]
    assert await update(b"late") is False


async def test_two_inserts_of_one_new_key_one_wins(table: PgSegmentStorage) -> None:
    results = await asyncio.gather(
        *(table.update_table(T, [e(b"new", b"%d" % i, NOT_EXISTS)], ANY) for i in range(4)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, list) for r in results) == 1
    assert (await table.table_info(T)).entry_count == 1
