"""Watermarks that readers can read: writers append events to real segments and note their times
over gRPC (noteTimestampFromWriter), the periodic job runs, and a reader reading the stream's
`_MARK` segment through the project's client sees the watermarks advance; a crash between a
watermark's append and its row, or a retried round, never appends a watermark twice.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.watermarks import WatermarkRpcs
from app.domain.errors import StoreUnavailable
from app.domain.ids import qualified_segment_name, segment_id
from app.domain.names import mark_stream_name
from app.domain.records import ScaleType, ScalingPolicy, StreamConfig
from app.domain.watermarks import MarkEntry, Watermark
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.client.marks import MarkReader, WireMarkStream
from app.services.watermarks import WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.clock import ManualClock
from app.testing.controller import running_controller
from tests.api.conftest import served
from tests.workers.test_watermarks import COUNT, SC, ST, World, make_stream, scale

SEGMENT_0, SEGMENT_1 = qualified_segment_name(SC, ST, 0), qualified_segment_name(SC, ST, 1)
# What a two-segment stream's segments become after one scale.
S2, S3 = segment_id(2, 1), segment_id(3, 1)


@dataclass
class Rig:
    w: World
    stub: ControllerServiceStub
    client: WireSegmentStore

    async def note(self, writer: str, time: int, position: dict[int, int]) -> None:
        request = pb.TimestampFromWriter(
            writer=writer,
            position=pb.StreamCut(streamInfo=pb.StreamInfo(scope=SC, stream=ST), cut=position),
            timestamp=time,
        )
        assert (await self.stub.noteTimestampFromWriter(request)).result == pb.TimestampResponse.SUCCESS

    async def mark_segment(self) -> str:
        """The `_MARK` stream's segment, as a client finds it: getCurrentSegments."""
        mark = pb.StreamInfo(scope=SC, stream=mark_stream_name(ST))
        ranges = await self.stub.getCurrentSegments(mark)
        [only] = ranges.segmentRanges
        return qualified_segment_name(SC, mark_stream_name(ST), only.segmentId.segmentId)

    async def round(self) -> None:
        self.w.clock.advance(10_000)
        await self.w.worker().run_once()


def service_with(w: World, marks: WireMarkStream) -> WatermarkService:
    return WatermarkService(w.store, w.clock, marks)


@pytest.fixture
async def rig(db_url: str) -> AsyncIterator[Rig]:
    async with running_controller(db_url, workers=False) as s:
        await s.scopes.create_scope(SC)
        await s.pool.execute(
            "INSERT INTO bucket_owners (service, bucket, owner, generation) "
            "SELECT 'watermarks', b, 'test', 1 FROM generate_series(0, $1 - 1) AS b "
            "ON CONFLICT (service, bucket) DO UPDATE SET owner = 'test', generation = 1",
            COUNT,
        )
        clock = ManualClock()
        store = PgWatermarkStore(s.pool)
        client: WireSegmentStore = s.storage.client
        service = WatermarkService(store, clock, WireMarkStream(client))
        w = World(s, clock, store, service, {b: 1 for b in range(COUNT)})
        async with served(s, [WatermarkRpcs(service)]) as stub:
            yield Rig(w, stub, client)


def offsets(entry: MarkEntry) -> dict[int, int]:
    return {s.segment: offset for s, offset in entry.watermark.stream_cut.items()}


def covers_the_key_space(watermark: Watermark) -> bool:
    ranges = sorted((s.low, s.high) for s in watermark.stream_cut)
    touching = all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    return ranges[0][0] == 0.0 and ranges[-1][1] == 1.0 and touching


async def test_a_reader_of_the_mark_segment_sees_watermarks_advance(rig: Rig) -> None:
    await make_stream(rig.w, segments=2)
    reader = MarkReader(rig.client, await rig.mark_segment())
    assert await reader.read_new() == []  # the mark stream exists from creation, empty
    seen: list[MarkEntry] = []
    lengths = {0: 0, 1: 0}
    for n in range(1, 5):
        # Two writers append real events (one each to each segment) and report where they are.
        for writer, size in (("w1", 100), ("w2", 60 + n)):
            lengths[0] = await rig.client.append(SEGMENT_0, size)
            lengths[1] = await rig.client.append(SEGMENT_1, size)
            time = 1_000 * n + (0 if writer == "w1" else 7)
            await rig.note(writer, time, dict(lengths))
        await rig.round()
        new = await reader.read_new()
        assert len(new) == 1, f"round {n}: {new}"
        [entry] = new
        assert (entry.watermark.lower_time_bound, entry.watermark.upper_time_bound) == (
            1_000 * n,
            1_000 * n + 7,
        )
        # The cut is the writers' furthest positions: what both segments hold now.
        assert offsets(entry) == lengths
        assert covers_the_key_space(entry.watermark)
        seen.append(entry)
    assert await reader.read_new() == []  # nothing new without a round

    # Lower bounds strictly increase, offsets never go back, entries follow each other.
    for before, after in itertools.pairwise(seen):
        assert after.watermark.lower_time_bound > before.watermark.lower_time_bound
        assert all(after_offset >= offsets(before)[s] for s, after_offset in offsets(after).items())
        assert after.start == before.end
    # The rows (REST, reporting) are the same watermarks, each knowing where its Event ends.
    rows = await rig.w.watermarks()
    assert [(r.watermark.lower_time_bound, r.mark_offset) for r in rows] == [
        (e.watermark.lower_time_bound, e.end) for e in seen
    ]

    # After a scale the writers move on to the new segments; the cut follows them.
    await scale(rig.w, [0, 1], [(0.0, 0.5), (0.5, 1.0)])
    new_2 = await rig.client.append(qualified_segment_name(SC, ST, S2), 50)
    await rig.note("w1", 9_000, {S2: new_2})
    await rig.note("w2", 9_001, {S3: 0})
    await rig.round()
    [after_scale] = await reader.read_new()
    assert after_scale.watermark.lower_time_bound == 9_000
    assert offsets(after_scale) == {S2: new_2, S3: 0}
    assert covers_the_key_space(after_scale.watermark)


class CrashAfterAppend(WireMarkStream):
    """The Event reaches the segment, then the controller 'dies' before the row is written: the
    append's answer never arrives (as a connection lost with the reply would)."""

    async def append(self, segment: str, watermark: Watermark, expected_offset: int) -> int | None:
        await super().append(segment, watermark, expected_offset)
        raise StoreUnavailable("the controller died after the append")


async def test_a_crash_between_the_append_and_the_row_appends_nothing_twice(rig: Rig) -> None:
    await make_stream(rig.w, segments=1)
    reader = MarkReader(rig.client, await rig.mark_segment())
    await rig.note("w1", 100, {0: 10})
    rig.w.service = service_with(rig.w, CrashAfterAppend(rig.client))
    await rig.round()
    assert await rig.w.watermarks() == []  # no row
    [landed] = await reader.read_new()
    assert landed.watermark.lower_time_bound == 100

    # The next process (a healthy one) computes a newer watermark, but its conditional append
    # finds the segment past the rows: it adopts the landed one as a row and appends nothing.
    rig.w.service = service_with(rig.w, WireMarkStream(rig.client))
    await rig.note("w1", 200, {0: 20})
    rig.w.clock.advance(10_000)
    summary = await rig.w.worker().run_once()
    assert (summary.emitted, summary.adopted, summary.not_landed) == (0, 1, 1)
    assert await reader.read_new() == []
    [row] = await rig.w.watermarks()
    assert (row.watermark.lower_time_bound, row.mark_offset) == (100, landed.end)

    # And then it goes on from there.
    await rig.round()
    [next_entry] = await reader.read_new()
    assert next_entry.watermark.lower_time_bound == 200 and next_entry.start == landed.end
    assert [r.watermark.lower_time_bound for r in await rig.w.watermarks()] == [100, 200]


async def test_a_retried_round_on_the_same_reads_appends_once(rig: Rig) -> None:
    await make_stream(rig.w, segments=1)
    reader = MarkReader(rig.client, await rig.mark_segment())
    await rig.note("w1", 100, {0: 10})
    page = await rig.w.members()
    fences = {m.bucket: rig.w.fence_for(m.bucket) for m in page}
    first = await rig.w.service.process(page, fences, 1)
    again = await rig.w.service.process(page, fences, 2)  # the same stale reads, retried
    assert (first.emitted, again.emitted, again.adopted) == (1, 0, 0)
    assert len(await reader.read_new()) == 1
    assert len(await rig.w.watermarks()) == 1


async def test_a_missing_mark_segment_holds_back_only_its_stream(rig: Rig) -> None:
    """As in Pravega, the round does not create it (it is created with its stream, and one gone
    now belongs to a stream being deleted): that stream gets no watermark, the others do."""
    await make_stream(rig.w, segments=1)
    await make_stream(rig.w, segments=1, name="other")
    await rig.client.delete_segment(await rig.mark_segment())
    await rig.note("w1", 100, {0: 10})
    await rig.w.service.note_timestamp(SC, "other", "w1", {0: 10}, 100)
    rig.w.clock.advance(10_000)
    summary = await rig.w.worker().run_once()
    assert (summary.emitted, summary.not_landed) == (1, 1)
    assert await rig.w.watermarks() == []
    assert [r.watermark.lower_time_bound for r in await rig.w.watermarks("other")] == [100]


async def test_a_served_controller_appends_its_watermarks_to_the_mark_segment(db_url: str) -> None:
    """As `serve` wires it: the periodic job of the buckets this process claimed writes `_MARK`."""
    async with running_controller(db_url, watermark_period_ms=100) as s:
        await s.scopes.create_scope(SC)
        await s.streams.create_stream(SC, ST, StreamConfig(ScalingPolicy.fixed(1)))
        async with served(s, [WatermarkRpcs(s.watermarking.service)]) as stub:
            rig = Rig(
                World(s, ManualClock(), PgWatermarkStore(s.pool), s.watermarking.service),
                stub,
                s.storage.client,
            )
            reader = MarkReader(rig.client, await rig.mark_segment())
            seen: list[int] = []
            for n in range(1, 3):
                length = await rig.client.append(SEGMENT_0, 30)
                await rig.note("w1", 1_000 * n, {0: length})
                async with asyncio.timeout(20):
                    while len(seen) < n:
                        seen += [e.watermark.lower_time_bound for e in await reader.read_new()]
                        await asyncio.sleep(0.05)
            assert seen == [1_000, 2_000]


async def test_rows_written_without_the_segment_then_with_it(rig: Rig) -> None:
    """A controller of the previous version (rows only) and one of this version take turns on a
    stream (a rolling upgrade): the segment's watermarks still only ever increase, none twice."""
    await make_stream(rig.w, segments=1)
    reader = MarkReader(rig.client, await rig.mark_segment())
    with_marks = rig.w.service
    rows_only = WatermarkService(rig.w.store, rig.w.clock)
    seen: list[int] = []
    for n, service in enumerate([rows_only, with_marks, rows_only, rows_only, with_marks, with_marks], 1):
        rig.w.service = service
        await rig.note("w1", 100 * n, {0: 10 * n})
        await rig.round()
        seen += [e.watermark.lower_time_bound for e in await reader.read_new()]
    assert seen == [200, 500, 600]
    assert [r.watermark.lower_time_bound for r in await rig.w.watermarks()] == [100 * n for n in range(1, 7)]


async def test_a_mark_segment_that_lost_its_watermarks_starts_again(rig: Rig) -> None:
    await make_stream(rig.w, segments=1)
    segment = await rig.mark_segment()
    await rig.note("w1", 100, {0: 10})
    await rig.round()
    # The store lost the segment's data (re-created empty): the rows say it ends further on.
    await rig.client.delete_segment(segment)
    await rig.client.create_segment(segment, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    await rig.note("w1", 200, {0: 20})
    await rig.round()
    [entry] = await MarkReader(rig.client, segment).read_new()
    assert (entry.start, entry.watermark.lower_time_bound) == (0, 200)
    assert [r.mark_offset for r in await rig.w.watermarks()] == [entry.end, entry.end]
