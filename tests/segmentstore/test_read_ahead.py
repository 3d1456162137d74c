"""Read-ahead over real TCP and PostgreSQL (app/segmentstore/server/read_ahead.py): a reader
catching up gets each next range from a read made ahead of it, with exactly the bytes PostgreSQL
holds; a truncation or deletion after the range was read ahead answers as PostgreSQL does now,
never with the bytes read before it; a read near the tail fetches nothing ahead."""

from __future__ import annotations

import asyncio

from app.metrics.registry import REGISTRY
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.wire import commands as wc
from tests.segmentstore.server_harness import Client, event, rid, wid

SEG = "sc/ahead/0.#epoch.0"
KIB = 1024
MIB = 1024 * KIB
STEP = 64 * KIB
# Long enough for a read ahead of 64 KiB to be in memory before the test changes the segment.
FETCHED_S = 0.3


def _count(server: SegmentStoreServer, name: str) -> float:
    labels = {"store": f"{server.address[0]}:{server.address[1]}"}
    return REGISTRY.get_sample_value(f"pgcontroller_segmentstore_{name}_total", labels) or 0.0


async def _filled(client: Client, size: int) -> bytes:
    """SEG holding one event of `size` bytes (past the read index's 1 MiB of a segment, so its
    head is read from PostgreSQL); returns the segment's bytes."""
    payload = bytes(range(256)) * (size // 256)
    await client.create(SEG)
    writer = wid()
    await client.setup(SEG, writer)
    assert isinstance(await client.append(writer, event(payload), 1), wc.DataAppended)
    return event(payload)


async def _second_range_read_ahead(client: Client) -> None:
    """SEG filled, its first STEP read, and the read ahead of the second fetched by now."""
    await _filled(client, 3 * MIB)
    first = await client.read(SEG, 0, STEP)
    assert isinstance(first, wc.SegmentRead) and len(first.data) == STEP
    await asyncio.sleep(FETCHED_S)


async def test_a_reader_catching_up_gets_its_next_ranges_read_ahead_with_the_bytes_postgresql_holds(
    server: SegmentStoreServer, client: Client
) -> None:
    data = await _filled(client, 3 * MIB)
    ahead_before, db_before = _count(server, "read_ahead_reads"), _count(server, "db_reads")
    read = bytearray()
    while len(read) < len(data):
        reply = await client.read(SEG, len(read), STEP)
        assert isinstance(reply, wc.SegmentRead) and reply.offset == len(read) and reply.data
        read += reply.data
    assert bytes(read) == data
    from_db = _count(server, "db_reads") - db_before
    from_ahead = _count(server, "read_ahead_reads") - ahead_before
    # The first 2 MiB at least are older than the read index's last 1 MiB: from PostgreSQL, and
    # every one but the first (and the last before the index's range) read ahead.
    assert from_db >= 2 * MIB // STEP
    assert from_ahead >= from_db - 2


async def test_a_truncation_after_a_range_was_read_ahead_answers_truncated_not_its_bytes(
    server: SegmentStoreServer, client: Client
) -> None:
    await _second_range_read_ahead(client)
    truncated = await client.call(wc.TruncateSegment(rid(), SEG, 4 * STEP, ""))
    assert isinstance(truncated, wc.SegmentTruncated)
    ahead_before = _count(server, "read_ahead_reads")
    reply = await client.read(SEG, STEP, STEP)
    assert isinstance(reply, wc.SegmentIsTruncated) and reply.start_offset == 4 * STEP
    assert _count(server, "read_ahead_reads") == ahead_before


async def test_a_deletion_after_a_range_was_read_ahead_answers_no_such_segment(
    server: SegmentStoreServer, client: Client
) -> None:
    await _second_range_read_ahead(client)
    assert isinstance(await client.call(wc.DeleteSegment(rid(), SEG, "")), wc.SegmentDeleted)
    reply = await client.read(SEG, STEP, STEP)
    assert isinstance(reply, wc.NoSuchSegment)


async def test_a_read_whose_next_range_reaches_the_tail_reads_nothing_ahead(
    server: SegmentStoreServer, client: Client
) -> None:
    """The read ahead of a range ending at the tail could answer at_tail after more was appended:
    such a range is left to the reader's own read."""
    data = await _filled(client, 3 * MIB)
    size = 3 * MIB // 2
    # The second range ends exactly at the tail and starts before the read index's last 1 MiB.
    first = await client.read(SEG, len(data) - 2 * size, size)
    assert isinstance(first, wc.SegmentRead) and len(first.data) == size and not first.at_tail
    await asyncio.sleep(FETCHED_S)
    ahead_before = _count(server, "read_ahead_reads")
    second = await client.read(SEG, len(data) - size, size)
    assert isinstance(second, wc.SegmentRead) and second.at_tail and second.data == data[-size:]
    assert _count(server, "read_ahead_reads") == ahead_before
