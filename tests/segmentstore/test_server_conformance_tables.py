"""The wire server's table segments over real TCP: create and delete (must_be_empty), the
conditional-update version matrix with all-or-nothing batches, version order, ReadTable for
present, absent and repeated keys, paged key and entry iteration, delta reads, the
table_segment_offset condition, table info, and two connections racing on one key."""

from __future__ import annotations

import asyncio

from app.segmentstore.wire import commands as wc
from tests.segmentstore.server_harness import Client, Connect, rid

TABLE = "sc/rg_kvtable/0.#epoch.0"
NO_VERSION = wc.TABLE_KEY_NO_VERSION
NOT_EXISTS = wc.TABLE_KEY_NOT_EXISTS


def entry(key: bytes, value: bytes, version: int = NO_VERSION) -> tuple[wc.TableKey, wc.TableValue]:
    return (wc.TableKey(key, version), wc.TableValue(value))


async def update(c: Client, *entries: tuple[wc.TableKey, wc.TableValue], offset: int = -1) -> wc.Command:
    return await c.call(wc.UpdateTableEntries(rid(), TABLE, "", tuple(entries), offset))


async def versions(c: Client, *entries: tuple[wc.TableKey, wc.TableValue]) -> tuple[int, ...]:
    reply = await update(c, *entries)
    assert isinstance(reply, wc.TableEntriesUpdated), reply
    return reply.versions


async def read(c: Client, *keys: bytes) -> tuple[tuple[wc.TableKey, wc.TableValue], ...]:
    request_id = rid()
    reply = await c.call(wc.ReadTable(request_id, TABLE, "", tuple(wc.TableKey(k, NO_VERSION) for k in keys)))
    assert isinstance(reply, wc.TableRead) and reply.request_id == request_id and reply.segment == TABLE, (
        reply
    )
    return reply.entries


async def test_create_twice_and_delete_must_be_empty(client: Client) -> None:
    await client.create_table(TABLE)
    assert isinstance(await client.call(wc.CreateTableSegment(rid(), TABLE, "")), wc.SegmentAlreadyExists)
    await versions(client, entry(b"k", b"v"))
    request_id = rid()
    reply = await client.call(wc.DeleteTableSegment(request_id, TABLE, True, ""))
    assert reply == wc.TableSegmentNotEmpty(request_id, TABLE, "")
    await client.expect(wc.DeleteTableSegment(rid(), TABLE, False, ""), wc.SegmentDeleted)
    request_id = rid()
    gone = await client.call(wc.DeleteTableSegment(request_id, TABLE, False, ""))
    assert isinstance(gone, wc.NoSuchSegment) and gone.request_id == request_id


async def test_the_version_matrix(client: Client) -> None:
    await client.create_table(TABLE)
    (v1,) = await versions(client, entry(b"a", b"1", NOT_EXISTS))  # insert if absent
    assert v1 >= 0
    bad = await update(client, entry(b"a", b"2", NOT_EXISTS))  # must not exist, but does
    assert isinstance(bad, wc.TableKeyBadVersion) and bad.segment == TABLE and bad.server_stack_trace == ""
    (v2,) = await versions(client, entry(b"a", b"2", v1))  # matching version
    assert v2 > v1
    assert isinstance(await update(client, entry(b"a", b"3", v1)), wc.TableKeyBadVersion)  # stale
    missing = await update(client, entry(b"b", b"1", 0))  # a version for an absent key
    assert isinstance(missing, wc.TableKeyDoesNotExist)
    (v3,) = await versions(client, entry(b"a", b"4"))  # unconditional
    assert v3 > v2
    # One bad item rejects the whole batch.
    batch = await update(client, entry(b"c", b"new", NOT_EXISTS), entry(b"a", b"5", v1))
    assert isinstance(batch, wc.TableKeyBadVersion)
    assert await read(client, b"a", b"c") == (entry(b"a", b"4", v3), entry(b"c", b"", -1))


async def test_versions_increase_in_input_order(client: Client) -> None:
    await client.create_table(TABLE)
    got = await versions(client, entry(b"z", b"1"), entry(b"a", b"2"), entry(b"m", b"3"))
    assert list(got) == sorted(got) and len(set(got)) == 3
    more = await versions(client, entry(b"a", b"x"))
    assert more[0] > max(got)
    # The same key twice in one batch: both are applied in order, the later value wins, each
    # gets its own version.
    twice = await versions(client, entry(b"d", b"first"), entry(b"d", b"second"))
    assert twice[0] < twice[1]
    assert await read(client, b"d") == (entry(b"d", b"second", twice[1]),)


async def test_read_table_present_absent_and_repeated_keys(client: Client) -> None:
    await client.create_table(TABLE)
    (va, vb) = await versions(client, entry(b"a", b"A"), entry(b"b", b"B"))
    got = await read(client, b"b", b"nope", b"a", b"b")
    assert got == (
        entry(b"b", b"B", vb),
        entry(b"nope", b"", -1),
        entry(b"a", b"A", va),
        entry(b"b", b"B", vb),
    )
    request_id = rid()
    missing = await client.call(
        wc.ReadTable(request_id, "sc/x_kvtable/0.#epoch.0", "", (wc.TableKey(b"a", -1),))
    )
    assert isinstance(missing, wc.NoSuchSegment) and missing.request_id == request_id


async def test_paged_iteration_of_keys_and_entries(client: Client) -> None:
    await client.create_table(TABLE)
    keys = [f"key-{i}".encode() for i in range(5)]
    await versions(client, *(entry(k, k.upper()) for k in reversed(keys)))
    for kind in ("keys", "entries"):
        token = b""
        seen: list[bytes] = []
        pages = 0
        while True:
            pages += 1
            assert pages < 20
            if kind == "keys":
                reply = await client.call(wc.ReadTableKeys(rid(), TABLE, "", 1, token))
                assert isinstance(reply, wc.TableKeysRead), reply
                page = [k.data for k in reply.keys]
            else:
                reply = await client.call(wc.ReadTableEntries(rid(), TABLE, "", 1, token))
                assert isinstance(reply, wc.TableEntriesRead), reply
                page = [k.data for k, v in reply.entries]
                assert all(v.data == k.data.upper() for k, v in reply.entries)
            if not page:
                break
            assert len(page) == 1
            seen.extend(page)
            token = reply.continuation_token
            if len(seen) == 2:
                # An update between pages neither repeats nor loses keys.
                await versions(client, entry(keys[0], keys[0].upper()))
        assert seen == sorted(keys), kind
    # An empty token starts over.
    first = await client.expect(wc.ReadTableKeys(rid(), TABLE, "", 2, b""), wc.TableKeysRead)
    assert [k.data for k in first.keys] == sorted(keys)[:2]


async def test_delta_reads(client: Client) -> None:
    await client.create_table(TABLE)

    async def delta(position: int, count: int = 10) -> wc.TableEntriesDeltaRead:
        return await client.expect(
            wc.ReadTableEntriesDelta(rid(), TABLE, "", position, count), wc.TableEntriesDeltaRead
        )

    (va, vb) = await versions(client, entry(b"a", b"1"), entry(b"b", b"1"))
    everything = await delta(0)
    assert [(k.data, k.key_version, v.data) for k, v in everything.entries] == [
        (b"a", va, b"1"),
        (b"b", vb, b"1"),
    ]
    assert not everything.should_clear
    assert (await delta(everything.last_position)).entries == ()
    (va2,) = await versions(client, entry(b"a", b"2"))
    after = await delta(everything.last_position)
    assert [(k.data, k.key_version, v.data) for k, v in after.entries] == [(b"a", va2, b"2")]
    # From 0: one entry per key, its newest version.
    again = await delta(0)
    assert sorted((k.data, k.key_version) for k, _ in again.entries) == [(b"a", va2), (b"b", vb)]
    await client.expect(
        wc.RemoveTableKeys(rid(), TABLE, "", (wc.TableKey(b"b", NO_VERSION),)), wc.TableKeysRemoved
    )
    assert [k.data for k, _ in (await delta(0)).entries] == [b"a"]
    beyond = await delta(after.last_position + 1000)
    assert beyond.entries == ()
    request_id = rid()
    missing = await client.call(wc.ReadTableEntriesDelta(request_id, "sc/x_kvtable/0.#epoch.0", "", 0, 10))
    assert isinstance(missing, wc.NoSuchSegment) and missing.request_id == request_id


async def test_remove_keys(client: Client) -> None:
    await client.create_table(TABLE)
    (va,) = await versions(client, entry(b"a", b"1"))
    request_id = rid()
    bad = await client.call(wc.RemoveTableKeys(request_id, TABLE, "", (wc.TableKey(b"a", va + 1),)))
    assert bad == wc.TableKeyBadVersion(request_id, TABLE, "")
    absent = await client.call(wc.RemoveTableKeys(rid(), TABLE, "", (wc.TableKey(b"zz", 0),)))
    assert isinstance(absent, wc.TableKeyDoesNotExist)
    # Unconditional removal of an absent key is a no-op.
    await client.expect(
        wc.RemoveTableKeys(rid(), TABLE, "", (wc.TableKey(b"zz", NO_VERSION),)), wc.TableKeysRemoved
    )
    request_id = rid()
    ok = await client.call(wc.RemoveTableKeys(request_id, TABLE, "", (wc.TableKey(b"a", va),)))
    assert ok == wc.TableKeysRemoved(request_id, TABLE)
    assert await read(client, b"a") == (entry(b"a", b"", -1),)


async def test_table_segment_offset_condition(client: Client) -> None:
    await client.create_table(TABLE)
    await versions(client, entry(b"a", b"1"))
    info = await client.expect(wc.GetTableSegmentInfo(rid(), TABLE, ""), wc.TableSegmentInfo)
    assert info.entry_count == 1 and info.length > 0 and info.segment_name == TABLE
    request_id = rid()
    stale = await client.call(
        wc.UpdateTableEntries(request_id, TABLE, "", (entry(b"b", b"2"),), info.length + 1)
    )
    assert (
        isinstance(stale, wc.SegmentIsTruncated) and stale.request_id == request_id and stale.segment == TABLE
    )
    ok = await client.call(wc.UpdateTableEntries(rid(), TABLE, "", (entry(b"b", b"2"),), info.length))
    assert isinstance(ok, wc.TableEntriesUpdated)


async def test_table_info_of_a_missing_table(client: Client) -> None:
    request_id = rid()
    reply = await client.call(wc.GetTableSegmentInfo(request_id, TABLE, ""))
    assert isinstance(reply, wc.NoSuchSegment) and reply.request_id == request_id


async def test_two_connections_racing_on_one_key(connect: Connect) -> None:
    first, second = await connect(), await connect()
    await first.create_table(TABLE)
    (v,) = await versions(first, entry(b"k", b"0"))
    for round_ in range(5):
        replies = await asyncio.gather(
            update(first, entry(b"k", f"first-{round_}".encode(), v)),
            update(second, entry(b"k", f"second-{round_}".encode(), v)),
        )
        winners = [r for r in replies if isinstance(r, wc.TableEntriesUpdated)]
        losers = [r for r in replies if isinstance(r, wc.TableKeyBadVersion)]
        assert len(winners) == 1 and len(losers) == 1, replies
        v = winners[0].versions[0]
