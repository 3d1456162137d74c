"""The wire server's segment administration over real TCP: create, seal, delete and re-create,
truncation, policy, attributes, single and batch merges (with attribute conditions, sealed
targets, truncated and missing sources, live writers on the source), and a table operation on a
stream segment (and the reverse)."""

from __future__ import annotations

from app.segmentstore.wire import commands as wc
from tests.segmentstore.server_harness import Client, Connect, event, rid, wid

SEG = "sc/st/0.#epoch.0"
MIN = wc.NULL_ATTRIBUTE_VALUE
MIB = 1024 * 1024


def txn_name(parent: str = SEG) -> str:
    return f"{parent}#transaction.{wid():032x}"


async def write(c: Client, name: str, payload: bytes, writer: int | None = None) -> int:
    writer = wid() if writer is None else writer
    await c.setup(name, writer)
    assert isinstance(await c.append(writer, event(payload), 1), wc.DataAppended)
    return writer


async def test_create_seal_delete_twice(client: Client) -> None:
    await client.create(SEG)
    request_id = rid()
    assert await client.call(wc.CreateSegment(request_id, SEG, 0, 0, "")) == wc.SegmentAlreadyExists(
        request_id, SEG, ""
    )
    await client.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    request_id = rid()
    again = await client.call(wc.SealSegment(request_id, SEG, ""))
    assert isinstance(again, wc.SegmentIsSealed) and again.request_id == request_id and again.segment == SEG
    await client.expect(wc.DeleteSegment(rid(), SEG, ""), wc.SegmentDeleted)
    request_id = rid()
    gone = await client.call(wc.DeleteSegment(request_id, SEG, ""))
    assert gone == wc.NoSuchSegment(request_id, SEG, "", -1)


async def test_a_table_and_a_stream_segment_share_one_namespace(client: Client) -> None:
    await client.create_table(SEG)
    assert isinstance(await client.call(wc.CreateSegment(rid(), SEG, 0, 0, "")), wc.SegmentAlreadyExists)


async def test_stream_segment_info(client: Client) -> None:
    request_id = rid()
    missing = await client.call(wc.GetStreamSegmentInfo(request_id, SEG, ""))
    assert missing == wc.NoSuchSegment(request_id, SEG, "", -1)
    await client.create(SEG)
    await write(client, SEG, b"abc")
    info = await client.info(SEG)
    assert (info.exists, info.is_sealed, info.is_deleted, info.write_offset, info.start_offset) == (
        True,
        False,
        False,
        11,
        0,
    )
    assert info.last_modified > 0


async def test_recreated_segment_is_empty_without_stale_attributes(client: Client) -> None:
    await client.create(SEG)
    writer = await write(client, SEG, b"old")
    await client.expect(wc.UpdateSegmentAttribute(rid(), SEG, 42, 1, MIN, ""), wc.SegmentAttributeUpdated)
    await client.expect(wc.DeleteSegment(rid(), SEG, ""), wc.SegmentDeleted)
    await client.create(SEG)
    info = await client.info(SEG)
    assert (info.write_offset, info.start_offset, info.is_sealed) == (0, 0, False)
    assert await client.setup(SEG, writer) == MIN
    assert (await client.expect(wc.GetSegmentAttribute(rid(), SEG, 42, ""), wc.SegmentAttribute)).value == MIN


async def test_truncate(client: Client) -> None:
    await client.create(SEG)
    await write(client, SEG, b"abcdef")  # 14 bytes
    await client.expect(wc.TruncateSegment(rid(), SEG, 0, ""), wc.SegmentTruncated)  # off == start
    await client.expect(wc.TruncateSegment(rid(), SEG, 10, ""), wc.SegmentTruncated)
    for offset in (5, 15):
        request_id = rid()
        reply = await client.call(wc.TruncateSegment(request_id, SEG, offset, ""))
        assert reply == wc.SegmentIsTruncated(request_id, SEG, 10, "", offset)
    await client.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    await client.expect(wc.TruncateSegment(rid(), SEG, 14, ""), wc.SegmentTruncated)
    info = await client.info(SEG)
    assert (info.start_offset, info.write_offset, info.is_sealed) == (14, 14, True)


async def test_update_policy(client: Client) -> None:
    request_id = rid()
    assert isinstance(await client.call(wc.UpdateSegmentPolicy(request_id, SEG, 10, 1, "")), wc.NoSuchSegment)
    await client.create(SEG)
    request_id = rid()
    reply = await client.call(wc.UpdateSegmentPolicy(request_id, SEG, 10, 1, ""))
    assert reply == wc.SegmentPolicyUpdated(request_id, SEG)


async def test_segment_attributes(client: Client) -> None:
    await client.create(SEG)
    attribute = wid()

    async def get() -> int:
        return (
            await client.expect(wc.GetSegmentAttribute(rid(), SEG, attribute, ""), wc.SegmentAttribute)
        ).value

    async def update(new: int, expected: int) -> bool:
        reply = await client.expect(
            wc.UpdateSegmentAttribute(rid(), SEG, attribute, new, expected, ""), wc.SegmentAttributeUpdated
        )
        return reply.success

    assert await get() == MIN
    assert not await update(5, 4)  # expected a value; it is absent
    assert await update(5, MIN)  # MIN: must be absent
    assert not await update(6, MIN)
    assert await update(6, 5)
    assert await get() == 6
    assert isinstance(
        await client.call(wc.GetSegmentAttribute(rid(), "nope/x/0.#epoch.0", 1, "")), wc.NoSuchSegment
    )


async def test_merge_empty_and_non_empty_sources(client: Client) -> None:
    await client.create(SEG)
    await write(client, SEG, b"base")  # 12 bytes
    empty, full = txn_name(), txn_name()
    await client.create(empty)
    await client.create(full)
    await write(client, full, b"txn-data")  # 16 bytes
    request_id = rid()
    merged = await client.call(wc.MergeSegments(request_id, SEG, empty, ""))
    assert merged == wc.SegmentsMerged(request_id, SEG, empty, 12)
    request_id = rid()
    merged = await client.call(wc.MergeSegments(request_id, SEG, full, ""))
    assert merged == wc.SegmentsMerged(request_id, SEG, full, 28)
    # Merging again (a retried request) reports the target's length.
    again = await client.expect(wc.MergeSegments(rid(), SEG, full, ""), wc.SegmentsMerged)
    assert again.new_target_write_offset == 28
    assert isinstance(await client.call(wc.GetStreamSegmentInfo(rid(), full, "")), wc.NoSuchSegment)
    read = await client.read(SEG, 0, MIB)
    assert isinstance(read, wc.SegmentRead) and read.data == event(b"base") + event(b"txn-data")


async def test_merge_seals_a_source_with_a_live_writer(connect: Connect) -> None:
    admin, writer_conn = await connect(), await connect()
    await admin.create(SEG)
    source = txn_name()
    await admin.create(source)
    writer = await write(writer_conn, source, b"one")
    await admin.expect(wc.MergeSegments(rid(), SEG, source, ""), wc.SegmentsMerged)
    # The source is sealed and merged away: the writer's next append fails and names it (the
    # storage deletes a merged source, so the reply is NoSuchSegment rather than Java's
    # SegmentIsSealed; a client handles both by moving on).
    request_id = rid()
    reply = await writer_conn.call(wc.AppendBlockEnd(writer, 9, event(b"two"), 1, 2, request_id))
    assert isinstance(reply, (wc.SegmentIsSealed, wc.NoSuchSegment)), reply
    assert reply.request_id == request_id and reply.segment == source


async def test_merge_into_a_sealed_or_missing_target(client: Client) -> None:
    source = txn_name()
    await client.create(source)
    request_id = rid()
    missing = await client.call(wc.MergeSegments(request_id, SEG, source, ""))
    assert (
        isinstance(missing, wc.NoSuchSegment) and missing.request_id == request_id and missing.segment == SEG
    )
    await client.create(SEG)
    await client.expect(wc.SealSegment(rid(), SEG, ""), wc.SegmentSealed)
    request_id = rid()
    sealed = await client.call(wc.MergeSegments(request_id, SEG, source, ""))
    assert (
        isinstance(sealed, wc.SegmentIsSealed) and sealed.request_id == request_id and sealed.segment == SEG
    )
    assert (await client.info(source)).write_offset == 0


async def test_merge_of_a_truncated_source_is_refused(client: Client) -> None:
    await client.create(SEG)
    source = txn_name()
    await client.create(source)
    await write(client, source, b"abc")
    await client.expect(wc.TruncateSegment(rid(), source, 4, ""), wc.SegmentTruncated)
    request_id = rid()
    reply = await client.call(wc.MergeSegments(request_id, SEG, source, ""))
    assert isinstance(reply, wc.SegmentIsTruncated) and reply.request_id == request_id
    assert (await client.info(SEG)).write_offset == 0


async def test_merge_with_a_failed_attribute_condition_changes_nothing(client: Client) -> None:
    await client.create(SEG)
    source = txn_name()
    await client.create(source)
    await write(client, source, b"abc")
    attribute = wid()
    update = wc.ConditionalAttributeUpdate(attribute, 4, 10, 3)  # ReplaceIfEquals 3 -> 10; it is absent
    request_id = rid()
    reply = await client.call(wc.MergeSegments(request_id, SEG, source, "", (update,)))
    assert reply == wc.SegmentAttributeUpdated(request_id, False)
    assert (await client.info(SEG)).write_offset == 0
    assert (await client.info(source)).write_offset == 11
    ok = wc.ConditionalAttributeUpdate(attribute, 4, 10, MIN)
    await client.expect(wc.MergeSegments(rid(), SEG, source, "", (ok,)), wc.SegmentsMerged)
    value = await client.expect(wc.GetSegmentAttribute(rid(), SEG, attribute, ""), wc.SegmentAttribute)
    assert value.value == 10


async def test_source_writer_numbers_are_not_copied_to_the_target(client: Client) -> None:
    await client.create(SEG)
    source = txn_name()
    await client.create(source)
    writer = await write(client, source, b"abc")
    await client.expect(wc.MergeSegments(rid(), SEG, source, ""), wc.SegmentsMerged)
    assert await client.setup(SEG, writer) == MIN


async def test_merge_batch(client: Client) -> None:
    await client.create(SEG)
    await write(client, SEG, b"base")  # 12
    first, second, missing = txn_name(), txn_name(), txn_name()
    for name, payload in ((first, b"one"), (second, b"second")):
        await client.create(name)
        await write(client, name, payload)
    request_id = rid()
    reply = await client.call(wc.MergeSegmentsBatch(request_id, SEG, (first, missing, second), ""))
    assert reply == wc.SegmentsBatchMerged(request_id, SEG, (first, missing, second), (23, 23, 37))
    read = await client.read(SEG, 0, MIB)
    assert isinstance(read, wc.SegmentRead) and read.data == event(b"base") + event(b"one") + event(b"second")
    request_id = rid()
    no_target = await client.call(wc.MergeSegmentsBatch(request_id, "sc/st/7.#epoch.0", (first,), ""))
    assert isinstance(no_target, wc.NoSuchSegment) and no_target.request_id == request_id


async def test_a_table_op_on_a_stream_segment_and_the_reverse_are_error_messages(client: Client) -> None:
    """Java fails these internally and closes the connection; we answer ErrorMessage (illegal
    argument) and keep the connection, so a client fails the one request instead of retrying it
    on new connections forever."""
    await client.create(SEG)
    table = "sc/rg_kvtable/0.#epoch.0"
    await client.create_table(table)
    key = (wc.TableKey(b"k", wc.TABLE_KEY_NO_VERSION),)
    for cmd in (
        wc.ReadTable(rid(), SEG, "", key),
        wc.UpdateTableEntries(rid(), SEG, "", ((key[0], wc.TableValue(b"v")),)),
        wc.ReadTableEntriesDelta(rid(), SEG, "", 0, 10),
        wc.ReadSegment(table, 0, 100, "", rid()),
    ):
        reply = await client.call(cmd)
        assert isinstance(reply, wc.ErrorMessage), (cmd, reply)
        assert reply.request_id == cmd.request_id and reply.error_code == 0
    # SetupAppend only reads the writer's attribute, which any segment has (Java answers it the
    # same way); the append itself is refused.
    writer = wid()
    assert await client.setup(table, writer) == MIN
    request_id = rid()
    refused = await client.call(wc.AppendBlockEnd(writer, 9, event(b"x"), 1, 1, request_id))
    assert (
        isinstance(refused, wc.ErrorMessage) and refused.request_id == request_id and refused.segment == table
    )
    assert (await client.info(SEG)).exists
