"""The key-value table client (app/kvtclient) against a real controller over gRPC and its
embedded segment store over TCP: tables created and deleted through the controller, entries put,
inserted, read, removed and iterated by Pravega's rules (conditional updates that lose races,
conditional removals, iteration of thousands of entries over several segments with continuation
tokens), keys in the segments Pravega's Java client would put them in."""

from __future__ import annotations

import asyncio
import socket

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.hosts import HostAddress
from app.kvtclient import (
    NOT_EXISTS,
    BadKeyVersion,
    InvalidKey,
    Put,
    Remove,
    TableEntry,
    TableKey,
    TableNotFound,
    TableUnavailable,
    Version,
)
from app.kvtclient.routing import hash_to_range
from app.kvtclient.segment import ATTEMPTS, TableSegment
from tests.kvtclient.conftest import SC, Cluster


def key(n: int) -> TableKey:
    return TableKey(f"user{n:04d}".encode())


# --- put, insert, get, remove ----------------------------------------------------------------------


async def test_entries_are_put_read_and_removed_in_the_segment_javas_client_picks(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=3, primary=8)
    # The controller made them as Pravega's does: table segments with the key length.
    rows = await kvc.services.pool.fetch(
        "SELECT name, kind, key_length FROM embedded_segments WHERE name LIKE 'kvc/t_kvtable/%' ORDER BY name"
    )
    assert [(r["name"], r["kind"], r["key_length"]) for r in rows] == [
        (f"{SC}/t_kvtable/{n}.#epoch.0", "table", 8) for n in range(3)
    ]
    async with await kvc.open("t") as table:
        # Java's client hashes user0003 to 0.11, user0002 to 0.42, user0000 to 0.92
        # (tests/unit/test_kvt_routing.py): segments 0, 1 and 2 of three.
        versions = {n: await table.put(key(n), f"v{n}".encode()) for n in (3, 2, 0)}
        stored = await kvc.stored("t")
        assert stored == {
            f"{SC}/t_kvtable/0.#epoch.0": {b"user0003"},
            f"{SC}/t_kvtable/1.#epoch.0": {b"user0002"},
            f"{SC}/t_kvtable/2.#epoch.0": {b"user0000"},
        }
        assert [versions[n].segment_id for n in (3, 2, 0)] == [0, 1, 2]

        got = await table.get_all([key(0), key(1), key(2), key(3)])
        assert got == [
            TableEntry(key(0), b"v0", versions[0]),
            None,
            TableEntry(key(2), b"v2", versions[2]),
            TableEntry(key(3), b"v3", versions[3]),
        ]
        assert await table.exists(key(2)) and not await table.exists(key(1))

        await table.remove(key(2))
        await table.remove(key(2))  # unconditional: an absent key is no error
        assert await table.get(key(2)) is None
        assert (await kvc.stored("t"))[f"{SC}/t_kvtable/1.#epoch.0"] == set()


async def test_an_unconditional_put_replaces_the_value_and_moves_the_version_on(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=2, primary=8)
    async with await kvc.open("t") as table:
        first = await table.put(key(1), b"a")
        second = await table.put(key(1), b"b")
        assert second.segment_id == first.segment_id and second.segment_version > first.segment_version
        assert await table.get(key(1)) == TableEntry(key(1), b"b", second)


# --- conditional updates ---------------------------------------------------------------------------


async def test_two_writers_racing_a_conditional_put_one_wins_the_other_gets_bad_key_version(
    kvc: Cluster,
) -> None:
    await kvc.create_table("t", partitions=3, primary=8)
    async with await kvc.open("t") as one, await kvc.open("t") as two:
        base = await one.put(key(7), b"start")
        for round_ in range(5):
            seen = await two.get(key(7))
            assert seen is not None
            results = await asyncio.gather(
                one.put(key(7), f"one-{round_}".encode(), seen.version),
                two.put(key(7), f"two-{round_}".encode(), seen.version),
                return_exceptions=True,
            )
            won = [r for r in results if isinstance(r, Version)]
            lost = [r for r in results if not isinstance(r, Version)]
            assert len(won) == 1 and len(lost) == 1, results
            assert isinstance(lost[0], BadKeyVersion), lost
            winner = "one" if isinstance(results[0], Version) else "two"
            assert await one.get(key(7)) == TableEntry(key(7), f"{winner}-{round_}".encode(), won[0])
        assert base.segment_version < won[0].segment_version

        # A stale version fails; so does a put conditioned on a version of a key since removed: with
        # BadKeyVersion, as Pravega's fixed-key layout answers (its key-value tables).
        with pytest.raises(BadKeyVersion):
            await one.put(key(7), b"stale", base)
        gone = await one.put(key(8), b"soon gone")
        await two.remove(key(8))
        with pytest.raises(BadKeyVersion):
            await one.put(key(8), b"back?", gone)
        assert await one.get(key(8)) is None


async def test_racing_inserts_of_a_new_key_one_wins(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=2, primary=8)
    async with await kvc.open("t") as one, await kvc.open("t") as two:
        results = await asyncio.gather(
            one.insert(key(3), b"one"), two.insert(key(3), b"two"), return_exceptions=True
        )
        assert sorted(type(r).__name__ for r in results) == ["BadKeyVersion", "Version"], results
        # NOT_EXISTS as a put's version is an insert too.
        with pytest.raises(BadKeyVersion):
            await one.put(key(3), b"again", NOT_EXISTS)


async def test_a_batch_on_one_primary_key_is_all_or_nothing(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=4, primary=8, secondary=2)
    lengths = await kvc.services.pool.fetch(
        "SELECT DISTINCT key_length FROM embedded_segments WHERE name LIKE 'kvc/t_kvtable/%'"
    )
    assert [r["key_length"] for r in lengths] == [10]  # primary + secondary
    async with await kvc.open("t") as table:
        a, b = TableKey(b"order-01", b"aa"), TableKey(b"order-01", b"bb")
        va, vb = await table.update([Put(a, b"1"), Put(b, b"1")])
        assert va.segment_id == vb.segment_id
        stale = va
        va2 = await table.put(a, b"2", va)
        with pytest.raises(BadKeyVersion):
            await table.update([Put(b, b"3", vb), Put(a, b"3", stale)])
        assert [e.value if e else None for e in await table.get_all([a, b])] == [b"2", b"1"]
        with pytest.raises(InvalidKey, match="same primary key"):
            await table.update([Put(a, b"x"), Put(TableKey(b"order-02", b"aa"), b"x")])
        with pytest.raises(InvalidKey, match="mix removals"):
            await table.update([Put(a, b"x"), Remove(b)])
        await table.update([Remove(a, va2), Remove(b, vb)])
        assert await table.get_all([a, b]) == [None, None]


# --- conditional removal ---------------------------------------------------------------------------


async def test_a_conditional_removal_with_a_wrong_version_fails_then_with_the_right_one_succeeds(
    kvc: Cluster,
) -> None:
    await kvc.create_table("t", partitions=3, primary=8)
    async with await kvc.open("t") as table:
        old = await table.put(key(5), b"x")
        current = await table.put(key(5), b"y")
        with pytest.raises(BadKeyVersion):
            await table.remove(key(5), old)
        assert await table.get(key(5)) == TableEntry(key(5), b"y", current)
        await table.remove(key(5), current)
        assert await table.get(key(5)) is None
        with pytest.raises(BadKeyVersion):
            await table.remove(key(5), current)


async def test_a_version_of_another_segment_is_refused_before_anything_is_sent(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=3, primary=8)
    async with await kvc.open("t") as table:
        in_zero = await table.put(key(3), b"x")  # segment 0
        await table.put(key(0), b"y")  # segment 2
        with pytest.raises(BadKeyVersion, match="another table segment"):
            await table.put(key(0), b"z", in_zero)
        still = await table.get(key(0))
        assert still is not None and still.value == b"y"


# --- key lengths ------------------------------------------------------------------------------------


async def test_keys_of_the_wrong_length_are_refused_by_the_client_and_by_the_segment_store(
    kvc: Cluster,
) -> None:
    await kvc.create_table("t", partitions=1, primary=8)
    async with await kvc.open("t") as table:
        with pytest.raises(InvalidKey, match="8 bytes, not 3"):
            await table.put(TableKey(b"abc"), b"x")
        # Past the client's own check, straight to the table segment: the fixed-key segment
        # store answers ErrorMessage(ILLEGAL_ARGUMENT), as Pravega's does.
        segment = next(iter(table._by_id.values()))
        with pytest.raises(InvalidKey, match="have 8 bytes, not 3"):
            await segment.put([(b"abc", b"x", -(1 << 63))])
        with pytest.raises(InvalidKey, match="have 8 bytes, not 9"):
            await segment.remove([(b"user00001", -(1 << 63))])


# --- iteration --------------------------------------------------------------------------------------


async def test_iteration_returns_every_entry_exactly_once_in_key_order_and_resumes_from_a_token(
    kvc: Cluster,
) -> None:
    count = 2000
    await kvc.create_table("t", partitions=4, primary=8)
    async with await kvc.open("t") as table:
        keys = [key(n) for n in range(count)]

        async def fill(part: list[TableKey]) -> None:
            for k in part:
                await table.put(k, k.primary[::-1])

        await asyncio.gather(*(fill(keys[i::8]) for i in range(8)))
        stored = await kvc.stored("t")
        assert sum(len(s) for s in stored.values()) == count
        assert all(len(s) > count // 8 for s in stored.values()), {n: len(s) for n, s in stored.items()}

        pages = [page async for page in table.entries(page_size=37)]
        seen = [e.key for page in pages for e in page.entries]
        assert seen == sorted(keys, key=lambda k: k.primary)
        assert all(e.value == e.key.primary[::-1] for page in pages for e in page.entries)
        assert all(len(page.entries) == 37 for page in pages[:-1])
        assert {e.version.segment_id for page in pages for e in page.entries} == {0, 1, 2, 3}

        # Resume from the 20th page's token with another client: the rest, exactly once.
        async with await kvc.open("t") as other:
            token = pages[19].continuation
            rest = [
                e.key async for page in other.entries(page_size=100, continuation=token) for e in page.entries
            ]
        assert rest == seen[20 * 37 :]

        key_pages = [page async for page in table.keys(page_size=500)]
        assert [k for page in key_pages for k in page.keys] == seen
        assert len(key_pages) == 4


async def test_iteration_of_one_primary_key_reads_only_its_secondary_keys(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=3, primary=4, secondary=2)
    async with await kvc.open("t") as table:
        for primary in (b"aaaa", b"bbbb"):
            await table.update([Put(TableKey(primary, bytes([0, i])), b"v") for i in range(30)])
        got = [e.key async for page in table.entries(page_size=7, primary_key=b"bbbb") for e in page.entries]
        assert got == [TableKey(b"bbbb", bytes([0, i])) for i in range(30)]


async def test_an_empty_table_iterates_to_nothing_and_a_foreign_token_is_refused(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=2, primary=8)
    async with await kvc.open("t") as table:
        assert [page async for page in table.entries()] == []
        with pytest.raises(InvalidKey, match="continuation token"):
            [page async for page in table.entries(continuation=b"short")]


# --- the table's life through the controller -----------------------------------------------------------


async def test_deleting_the_table_removes_its_segments_and_its_data(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=3, primary=8)
    async with await kvc.open("t") as table:
        for n in range(30):
            await table.put(key(n), b"x")
        assert len(await kvc.stored("t")) == 3
        deleted = await kvc.stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope=SC, kvtName="t"))
        assert deleted.status == pb.DeleteKVTableStatus.SUCCESS
        assert await kvc.stored("t") == {}
        assert (
            await kvc.services.pool.fetchval(
                "SELECT count(*) FROM table_entries WHERE segment LIKE $1", f"{SC}/t_kvtable/%"
            )
            == 0
        )
        with pytest.raises(TableNotFound):
            await table.get(key(1))
    with pytest.raises(TableNotFound):
        await kvc.open("t")


async def test_opening_a_missing_table_is_table_not_found(kvc: Cluster) -> None:
    with pytest.raises(TableNotFound):
        await kvc.open("nothing")


def test_the_routing_fractions_used_above_are_javas() -> None:
    assert (
        hash_to_range(b"user0003") < 1 / 3 < hash_to_range(b"user0002") < 2 / 3 < hash_to_range(b"user0000")
    )


# --- retries ---------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_request_to_a_dead_endpoint_is_retried_where_the_controller_says_then_gives_up(
    kvc: Cluster,
) -> None:
    await kvc.create_table("t", partitions=1, primary=8)
    async with await kvc.open("t") as table:
        real = next(iter(table._by_id.values()))
        asked: list[bool] = []
        right = await real._resolve(True)
        dead = HostAddress("127.0.0.1", closed_port())

        async def first_dead(refresh: bool) -> HostAddress:
            asked.append(refresh)
            return right if refresh else dead

        flaky = TableSegment(real.name, real.segment_id, real._pool, first_dead)
        assert await flaky.put([(b"user0001", b"v", -(1 << 63))]) == [0]
        assert asked == [False, True]

        async def always_dead(refresh: bool) -> HostAddress:
            return dead

        hopeless = TableSegment(real.name, real.segment_id, real._pool, always_dead)
        with pytest.raises(TableUnavailable, match=f"no answer after {ATTEMPTS} attempts"):
            await hopeless.get([b"user0001"])
        assert await table.get(key(1)) == TableEntry(key(1), b"v", Version(real.segment_id, 0))


async def test_batches_over_pravegas_limits_are_refused_before_anything_is_sent(kvc: Cluster) -> None:
    await kvc.create_table("t", partitions=1, primary=4, secondary=4)
    async with await kvc.open("t") as table:
        with pytest.raises(InvalidKey, match="at most 256 keys, not 257"):
            await table.update([Put(TableKey(b"pkey", i.to_bytes(4, "big")), b"v") for i in range(257)])
        big = bytes(1024 * 1024 - 8192)
        with pytest.raises(InvalidKey, match="at most 16769023 bytes"):
            await table.update([Put(TableKey(b"pkey", i.to_bytes(4, "big")), big) for i in range(17)])
        with pytest.raises(InvalidKey, match="a value has at most"):
            await table.put(TableKey(b"pkey", b"0000"), big + b"!")
        assert [page async for page in table.entries()] == []
        # The largest value there is goes through.
        version = await table.put(TableKey(b"pkey", b"0000"), big)
        assert await table.get(TableKey(b"pkey", b"0000")) == TableEntry(
            TableKey(b"pkey", b"0000"), big, version
        )
