"""The client's calls for revisioned `_MARK` segments against the embedded store over TCP: a
conditional append lands only at the named offset, bounded reads return exactly the asked range
(across many chunks, never waiting at the tail), and the reader decodes what the writer appended."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from app.domain.errors import FinalFailure, IllegalState, InvalidInput, NotFound
from app.domain.records import ScaleType
from app.domain.watermarks import SegmentRange, Watermark
from app.ports import MarkTail
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client import store as store_module
from app.segmentstore.client.marks import MarkReader, WireMarkStream
from app.segmentstore.watermark_codec import frame_event, serialize_watermark
from app.store.pool import create_pool
from app.testing.segment_store import embedded_segment_store

SEG = "sc/_MARKst/0.#epoch.0"


@pytest.fixture
async def client(db_url: str) -> AsyncIterator[WireSegmentStore]:
    pool = await create_pool(db_url, min_size=1, max_size=4)
    try:
        # A tail read would park for 10 s: a read that reached the tail would fail the timeout.
        async with embedded_segment_store(pool, tail_wait_s=10.0) as store:
            await store.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
            yield store
    finally:
        await pool.close()


def mark(low: int) -> Watermark:
    return Watermark(low, low + 1, {SegmentRange(0, 0.0, 1.0): low * 10})


async def test_a_conditional_append_lands_only_at_the_named_offset(client: WireSegmentStore) -> None:
    first = serialize_watermark(mark(1))
    end = await client.conditional_append(SEG, first, 0)
    assert end == 8 + len(first)
    assert await client.conditional_append(SEG, first, 0) is None  # a retry after a lost reply
    assert await client.conditional_append(SEG, first, end + 1) is None
    assert (await client.get_segment_info(SEG)).length == end
    assert await client.read_range(SEG, 0, end) == frame_event(first)
    second = await client.conditional_append(SEG, serialize_watermark(mark(2)), end)
    assert second is not None and second > end


async def test_only_one_of_two_racing_appends_lands(client: WireSegmentStore) -> None:
    results = await asyncio.gather(
        *(client.conditional_append(SEG, serialize_watermark(mark(n)), 0) for n in range(1, 5))
    )
    assert sum(r is not None for r in results) == 1
    [entry] = (await WireMarkStream(client).read_from(SEG, 0)).entries
    winner = results.index(entry.end) + 1
    assert entry.watermark.lower_time_bound == winner


async def test_refusals(client: WireSegmentStore) -> None:
    with pytest.raises(NotFound):
        await client.conditional_append("sc/_MARKnone/0.#epoch.0", b"x", 0)
    with pytest.raises(ValueError, match="negative"):
        await client.conditional_append(SEG, b"x", -1)
    await client.seal_segment(SEG)
    with pytest.raises(IllegalState):
        await client.conditional_append(SEG, b"x", 0)


@pytest.mark.parametrize("chunk", [1 << 20, 50])
async def test_read_range_across_many_appends(
    client: WireSegmentStore, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 bytes a request: the range comes in many ReadSegments, none past the end.
    monkeypatch.setattr(store_module, "_READ_CHUNK_BYTES", chunk)
    expected = b""
    for n in range(1, 40):
        payload = serialize_watermark(mark(n))
        assert await client.conditional_append(SEG, payload, len(expected)) is not None
        expected += frame_event(payload)
    assert await client.read_range(SEG, 0, len(expected)) == expected
    assert await client.read_range(SEG, 37, 91) == expected[37:91]
    assert await client.read_range(SEG, len(expected), len(expected)) == b""
    with pytest.raises(ValueError):
        await client.read_range(SEG, 5, 4)


async def test_the_reader_reads_what_was_appended_in_order(client: WireSegmentStore) -> None:
    marks = WireMarkStream(client)
    reader = MarkReader(client, SEG)
    assert await reader.read_new() == []
    end = await marks.append(SEG, mark(1), 0)
    assert end is not None
    end = await marks.append(SEG, mark(2), end)
    assert end is not None
    assert [e.watermark.lower_time_bound for e in await reader.read_new()] == [1, 2]
    assert await marks.append(SEG, mark(3), end) is not None
    assert [e.watermark.lower_time_bound for e in await reader.read_new()] == [3]
    length = (await client.get_segment_info(SEG)).length
    assert reader.position == length
    # Past the end, the port reads all the segment holds (it lost what the caller knew of it);
    # a reader whose position is past the end is told.
    tail = await marks.read_from(SEG, length + 1)
    assert ([e.watermark.lower_time_bound for e in tail.entries], tail.end) == ([1, 2, 3], length)
    assert await marks.read_from(SEG, length) == MarkTail((), length)
    reader.position = length + 1
    with pytest.raises(InvalidInput, match="short of"):
        await reader.read_new()


async def test_a_segment_holding_something_else_is_a_clear_error(client: WireSegmentStore) -> None:
    assert await client.append(SEG, 20) == 20  # a plain event of 12 zero bytes
    with pytest.raises(FinalFailure, match="does not hold watermarks from 0"):
        await WireMarkStream(client).read_from(SEG, 0)
    bogus = struct.pack(">ii", 7, 0)  # an Event whose payload is no watermark
    assert await client.conditional_append(SEG, bogus, 20) is not None
    with pytest.raises(FinalFailure, match="the Event at offset 20: watermark: 0 revisions"):
        await WireMarkStream(client).read_from(SEG, 20)


async def test_an_unwritable_watermark_is_a_domain_error(client: WireSegmentStore) -> None:
    with pytest.raises(InvalidInput, match="cannot be written"):
        await WireMarkStream(client).append(SEG, Watermark(1, 2**63, {}), 0)
    assert (await client.get_segment_info(SEG)).length == 0
