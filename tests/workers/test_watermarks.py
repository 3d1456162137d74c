"""The periodic watermark job and the marks committed transactions leave,
over the real services and database, one pass at a time (`run_once`) on a clock the test moves.

Writers join, advance, wait and leave as in Pravega's WatermarkWorkflowTest; ownership is
seeded in bucket_owners with plain SQL and handed to the worker as fences.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from app.domain.cluster import DEFAULT_COUNTS, BucketService, Fence, stream_bucket
from app.domain.errors import StoreUnavailable
from app.domain.ids import qualified_segment_name, segment_id, transaction_segment_name
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.requests import Processor
from app.domain.watermarks import NoteOutcome, RemoveOutcome, WriterMark
from app.ports import StoredWatermark, WatermarkMember
from app.services.watermarks import RoundSummary, WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.clock import ManualClock
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.handlers import commit_handlers, stream_request_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner
from workers.watermarking import WatermarkWorker

SC, ST = "wm", "s"
COUNT = 100
ALL_REQUEST_BUCKETS = list(range(DEFAULT_COUNTS.requests))
S3, S4 = segment_id(3, 1), segment_id(4, 1)


@dataclass
class World:
    s: Services
    clock: ManualClock
    store: PgWatermarkStore
    service: WatermarkService
    generations: dict[int, int] = field(default_factory=dict)  # what the worker believes it holds

    def worker(self, page_size: int = 500, period_ms: int = 10_000) -> WatermarkWorker:
        return WatermarkWorker(
            self.service,
            lambda: frozenset(self.generations),
            COUNT,
            self.fence_for,
            self.clock,
            period_ms=period_ms,
            page_size=page_size,
        )

    def fence_for(self, bucket: int) -> Fence | None:
        generation = self.generations.get(bucket)
        return None if generation is None else Fence(BucketService.WATERMARKS, bucket, generation)

    async def note(self, writer: str, time: int, position: dict[int, int], name: str = ST) -> None:
        assert await self.service.note_timestamp(SC, name, writer, position, time) is NoteOutcome.SUCCESS

    async def watermarks(self, name: str = ST) -> list[StoredWatermark]:
        """Oldest first."""
        return list(reversed(await self.service.list_watermarks(SC, name, 1000)))

    async def writers(self, name: str = ST) -> dict[str, WriterMark]:
        member = await self.store.member(SC, name, COUNT)
        return {} if member is None else {t.writer: t.mark for t in member.marks}

    async def members(self) -> list[WatermarkMember]:
        return await self.store.members(list(range(COUNT)), COUNT, 0, 1000)


@pytest.fixture
async def w(db_url: str) -> AsyncIterator[World]:
    async with running_controller(db_url, workers=False) as s:
        await s.scopes.create_scope(SC)
        # This process owns every watermark bucket at generation 1.
        await s.pool.execute(
            "INSERT INTO bucket_owners (service, bucket, owner, generation) "
            "SELECT 'watermarks', b, 'test', 1 FROM generate_series(0, $1 - 1) AS b "
            "ON CONFLICT (service, bucket) DO UPDATE SET owner = 'test', generation = 1",
            COUNT,
        )
        clock = ManualClock()
        store = PgWatermarkStore(s.pool)
        yield World(s, clock, store, WatermarkService(store, clock), {b: 1 for b in range(COUNT)})


async def make_stream(w: World, segments: int = 3, aggregation_ms: int = 0, name: str = ST) -> None:
    config = StreamConfig(ScalingPolicy.fixed(segments), timestamp_aggregation_timeout=aggregation_ms)
    await w.s.streams.create_stream(SC, name, config)


def cut_of(stored: StoredWatermark) -> dict[int, int]:
    return {s.segment: offset for s, offset in stored.watermark.stream_cut.items()}


def _runner(s: Services, processor: Processor, marks: WatermarkService | None = None) -> RequestRunner:
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    if processor is Processor.COMMITS:
        handler = CommitTxnsHandler(deps, s.requests, writer_marks=marks)
        return RequestRunner(
            s.requests,
            commit_handlers(handler),
            s.clock,
            processor=processor,
            started_check=handler.started,
            max_failures=TEST_SETTINGS.request_max_failures,
        )
    return RequestRunner(
        s.requests, stream_request_handlers(deps), s.clock, max_failures=TEST_SETTINGS.request_max_failures
    )


async def run_pending(s: Services, processor: Processor, marks: WatermarkService | None = None) -> None:
    runner = _runner(s, processor, marks)
    for request in await s.requests.pending(processor, ALL_REQUEST_BUCKETS, [], 1000):
        await runner.attempt(dataclasses.replace(request, not_before=0))
    assert not await s.requests.pending(processor, ALL_REQUEST_BUCKETS, [], 1000)


async def scale(w: World, sealed: Sequence[int], ranges: Sequence[tuple[float, float]]) -> None:
    outcome = await w.s.lifecycle.scaling.scale(SC, ST, list(sealed), list(ranges), 1_000)
    assert outcome.status.value == "STARTED"
    await run_pending(w.s, Processor.REQUESTS)


# --- the periodic job: writers join, advance and leave ---------------------------------------------


async def test_watermarking_workflow(w: World) -> None:
    """Pravega's testWatermarkingWorkflow, step by step."""
    await make_stream(w, segments=3, aggregation_ms=10_000)
    # As Java's test does, lower minNumSegments in the record alone (no scale), so that three
    # segments may later become two.
    record = await w.s.stream_store.get_config_record(SC, ST)
    config = dataclasses.replace(record.value[0], scaling=ScalingPolicy.fixed(1))
    await w.s.stream_store.set_config(SC, ST, config, False, record.version)
    worker = w.worker()
    await w.note("writer1", 100, {0: 100, 1: 200})
    await w.note("writer2", 101, {1: 100, 2: 200})
    await w.note("writer3", 102, {2: 100, 0: 200})
    summary = await worker.run_once()
    assert (summary.streams, summary.emitted) == (1, 1)
    [first] = await w.watermarks()
    assert (first.seq, first.watermark.lower_time_bound, first.watermark.upper_time_bound) == (1, 100, 102)
    assert cut_of(first) == {0: 200, 1: 200, 2: 200}

    # Nothing reported on segment 0 this time: the previous cut keeps it.
    await w.note("writer1", 200, {1: 300})
    await w.note("writer2", 201, {1: 100, 2: 300})
    await w.note("writer3", 202, {2: 300})
    await worker.run_once()
    second = (await w.watermarks())[-1]
    assert second.watermark.lower_time_bound == 200 and cut_of(second) == {0: 200, 1: 300, 2: 300}

    # Scale 0, 1, 2 -> 3, 4; writer 3 moved to segment 3 and has the lowest time.
    await scale(w, [0, 1, 2], [(0.0, 0.5), (0.5, 1.0)])
    await w.note("writer1", 302, {0: 300, 1: 400})
    await w.note("writer2", 301, {1: 100, 2: 400})
    await w.note("writer3", 300, {S3: 100})
    await worker.run_once()
    third = (await w.watermarks())[-1]
    assert third.watermark.lower_time_bound == 300 and cut_of(third) == {S3: 100, S4: 0}

    # Writer 3 goes quiet: active (alive, within its 10 s) but not participating, so no watermark,
    # and its mark stays.
    await w.note("writer1", 400, {0: 400, 1: 400})
    await w.note("writer2", 401, {1: 100, 2: 400})
    summary = await worker.run_once()
    assert summary.emitted == 0 and len(await w.watermarks()) == 3
    assert (await w.writers())["writer3"] == WriterMark(300, {S3: 100}, alive=True)

    # removeWriter: the next round leaves it out and removes its mark; the cut is already ahead.
    assert await w.service.remove_writer(SC, ST, "writer3") is RemoveOutcome.SUCCESS
    assert (await w.writers())["writer3"].alive is False
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed) == (1, 1)
    fourth = (await w.watermarks())[-1]
    assert fourth.watermark.lower_time_bound == 400 and cut_of(fourth) == {S3: 100, S4: 0}
    assert "writer3" not in await w.writers()

    # Writer 3 comes back on segment 4.
    await w.note("writer1", 500, {0: 500, 1: 500})
    await w.note("writer2", 501, {1: 100, 2: 500})
    await w.note("writer3", 502, {S4: 500})
    await worker.run_once()
    fifth = (await w.watermarks())[-1]
    assert fifth.seq == 5 and fifth.watermark.lower_time_bound == 500
    assert cut_of(fifth) == {S3: 100, S4: 500}


async def test_writer_timeout(w: World) -> None:
    """Pravega's testWriterTimeout: inactivity is timed from the first round that saw it."""
    await make_stream(w, segments=3, aggregation_ms=3_000)
    worker = w.worker()
    await w.note("writer1", 102, {0: 100, 1: 0, 2: 0})
    await w.note("writer2", 101, {0: 0, 1: 100, 2: 0})
    await w.note("writer3", 100, {0: 0, 1: 0, 2: 100})
    await worker.run_once()
    assert len(await w.watermarks()) == 1

    await w.note("writer1", 200, {0: 200, 1: 0, 2: 0})
    await w.note("writer2", 200, {0: 0, 1: 200, 2: 0})
    started = w.clock.now
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed) == (0, 0)
    assert await inactive_since(w, "writer3") == started

    w.clock.now += 1_000
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed, summary.left_bucket) == (0, 0, 0)
    assert await inactive_since(w, "writer3") == started  # timed from the first round

    w.clock.now = started + 5_000
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed, summary.left_bucket) == (1, 1, 0)
    second = (await w.watermarks())[-1]
    assert second.watermark.lower_time_bound == 200 and cut_of(second) == {0: 200, 1: 200, 2: 100}
    assert set(await w.writers()) == {"writer1", "writer2"}

    # Now writers 1 and 2 are behind the watermark they made: tracked, then timed out.
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed) == (0, 0)
    w.clock.now += 5_000
    summary = await worker.run_once()
    assert (summary.writers_removed, summary.left_bucket) == (2, 1)
    assert await w.members() == []

    # A new mark brings the stream back; the cut carries on from the last watermark.
    await w.note("writer3", 300, {0: 300, 1: 0, 2: 0})
    summary = await worker.run_once()
    assert (summary.streams, summary.emitted) == (1, 1)
    third = (await w.watermarks())[-1]
    assert third.watermark.lower_time_bound == 300 and cut_of(third) == {0: 300, 1: 200, 2: 100}


async def inactive_since(w: World, writer: str) -> int | None:
    value = await w.s.pool.fetchval("SELECT inactive_since FROM writer_marks WHERE writer = $1", writer)
    return None if value is None else int(value)


async def test_without_a_timeout_a_writer_behind_is_dropped_at_once(w: World) -> None:
    await make_stream(w, segments=2)
    worker = w.worker()
    await w.note("fast", 10, {0: 10, 1: 10})
    await w.note("slow", 5, {0: 5})
    await worker.run_once()
    assert [x.watermark.lower_time_bound for x in await w.watermarks()] == [5]

    await w.note("fast", 20, {0: 20, 1: 20})  # "slow" reports nothing newer than 5
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed) == (1, 1)
    assert [x.watermark.lower_time_bound for x in await w.watermarks()] == [5, 20]
    assert set(await w.writers()) == {"fast"}


async def test_a_silent_stream_leaves_the_bucket_and_a_note_brings_it_back(w: World) -> None:
    await make_stream(w, segments=1)
    worker = w.worker()
    await w.note("only", 10, {0: 1})
    assert (await worker.run_once()).emitted == 1
    summary = await worker.run_once()  # no new report: behind its own watermark, timeout 0
    assert (summary.streams, summary.left_bucket, summary.writers_removed) == (1, 1, 1)
    assert await w.members() == []
    assert (await worker.run_once()).streams == 0

    await w.note("only", 11, {0: 2})
    assert (await worker.run_once()).emitted == 1
    assert [x.seq for x in await w.watermarks()] == [1, 2]


async def test_time_must_advance_for_a_watermark(w: World) -> None:
    await make_stream(w, segments=1, aggregation_ms=60_000)
    worker = w.worker()
    await w.note("a", 10, {0: 1})
    await w.note("b", 20, {0: 1})
    await worker.run_once()
    await w.note("b", 30, {0: 2})  # "a" stays at 10, the previous lower bound: not participating
    assert (await worker.run_once()).emitted == 0
    await w.note("a", 10, {0: 3})  # equal time is a valid note, but does not move the bound
    assert (await worker.run_once()).emitted == 0
    await w.note("a", 11, {0: 3})
    assert (await worker.run_once()).emitted == 1
    assert [(x.watermark.lower_time_bound, x.watermark.upper_time_bound) for x in await w.watermarks()] == [
        (10, 20),
        (11, 30),
    ]


async def test_every_stream_of_the_owned_buckets_in_pages(w: World) -> None:
    names = [f"s{i}" for i in range(5)]
    for name in names:
        await make_stream(w, segments=2, name=name)
        await w.note("w", 7, {0: 1, 1: 2}, name=name)
    summary = await w.worker(page_size=2).run_once()
    assert (summary.streams, summary.emitted) == (5, 5)
    for name in names:
        [only] = await w.watermarks(name)
        assert cut_of(only) == {0: 1, 1: 2}

    # Buckets not owned are not even read.
    mine = stream_bucket(SC, "s0", COUNT)
    w.generations = {mine: 1}
    for name in names:
        await w.note("w", 8, {0: 1, 1: 2}, name=name)
    summary = await w.worker(page_size=2).run_once()
    expected = sum(1 for name in names if stream_bucket(SC, name, COUNT) == mine)
    assert (summary.streams, summary.emitted) == (expected, expected)


async def test_unknown_segments_in_a_position_are_left_out(w: World) -> None:
    await make_stream(w, segments=2)
    await w.note("w", 7, {0: 5, 1: 6, 12345: 9})
    assert (await w.worker().run_once()).emitted == 1
    assert cut_of((await w.watermarks())[-1]) == {0: 5, 1: 6}


async def test_a_writer_without_any_position_gets_no_first_watermark(w: World) -> None:
    # Java's computation fails on an empty bound; with no previous cut there is nothing to fill.
    await make_stream(w, segments=2)
    await w.note("w", 7, {})
    summary = await w.worker().run_once()
    assert (summary.streams, summary.emitted) == (1, 0)


# --- fencing ---------------------------------------------------------------------------------------


async def test_a_stale_fence_writes_nothing(w: World) -> None:
    await make_stream(w, segments=1)
    bucket = stream_bucket(SC, ST, COUNT)
    await w.note("a", 10, {0: 1})
    await w.note("b", 10, {0: 1})
    worker = w.worker()
    await worker.run_once()
    # Another process claimed the bucket (generation 2); this one still believes it holds 1.
    await w.s.pool.execute(
        "UPDATE bucket_owners SET generation = 2, owner = 'other' "
        "WHERE service = 'watermarks' AND bucket = $1",
        bucket,
    )
    await w.note("a", 20, {0: 2})  # "b" falls behind: would be removed, and a watermark emitted
    summary = await worker.run_once()
    assert (summary.streams, summary.emitted, summary.not_landed, summary.writers_removed) == (1, 0, 1, 0)
    assert len(await w.watermarks()) == 1
    assert set(await w.writers()) == {"a", "b"}

    # Not owned at all: skipped without a read of its marks.
    del w.generations[bucket]
    w.generations[(bucket + 1) % COUNT] = 1
    summary = await worker.run_once()
    assert (summary.streams, summary.skipped) == (0, 0)  # not in the owned buckets: not listed
    assert await w.service.process(await w.members(), {}) == RoundSummary(skipped=1)

    # The new owner's fence works.
    w.generations = {bucket: 2}
    summary = await worker.run_once()
    assert (summary.emitted, summary.writers_removed) == (1, 1)


async def test_one_streams_round(w: World) -> None:
    await make_stream(w, segments=1)
    await w.note("a", 10, {0: 4})
    fence = w.fence_for(stream_bucket(SC, ST, COUNT))
    assert fence is not None
    summary = await w.service.watermark_stream(SC, ST, fence, COUNT)
    assert (summary.streams, summary.emitted) == (1, 1)
    wrong = Fence(BucketService.WATERMARKS, (fence.bucket + 1) % COUNT, 1)
    assert (await w.service.watermark_stream(SC, ST, wrong, COUNT)).skipped == 1


# --- the loop --------------------------------------------------------------------------------------


class FlakyService(WatermarkService):
    """The database goes away for one pass."""

    def __init__(self, store: PgWatermarkStore, clock: ManualClock) -> None:
        super().__init__(store, clock)
        self.failures = 1

    async def members(
        self, buckets: Sequence[int], bucket_count: int, after_stream_id: int, limit: int
    ) -> list[WatermarkMember]:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("metadata store unavailable: test")
        return await super().members(buckets, bucket_count, after_stream_id, limit)


async def test_run_survives_a_failed_pass_and_keeps_its_period(w: World) -> None:
    await make_stream(w, segments=1)
    await w.note("a", 10, {0: 4})
    service = FlakyService(w.store, w.clock)
    worker = WatermarkWorker(
        service, lambda: frozenset(w.generations), COUNT, w.fence_for, w.clock, period_ms=50
    )
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            while not await w.watermarks():  # noqa: ASYNC110 - the database is what changes
                await asyncio.sleep(0.02)
        assert service.failures == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- marks from committed transactions ----------------------------------------------------------


async def test_committed_transactions_note_their_writers_marks(w: World) -> None:
    await make_stream(w, segments=2)
    await w.s.segment_store.append(qualified_segment_name(SC, ST, 0), 1_000)
    first = await w.s.transactions.create(SC, ST, 10_000)
    second = await w.s.transactions.create(SC, ST, 10_000)
    third = await w.s.transactions.create(SC, ST, 10_000)
    for made, size in ((first, 10), (second, 20), (third, 40)):
        txn = made.txn
        for parent in (0, 1):
            name = transaction_segment_name(qualified_segment_name(SC, ST, parent), txn.high, txn.low)
            await w.s.segment_store.append(name, size)
    assert (await w.s.transactions.commit(SC, ST, first.txn, "tw", 1_234)).value == "SUCCESS"
    assert (await w.s.transactions.commit(SC, ST, second.txn, "tw", 1_200)).value == "SUCCESS"
    assert (await w.s.transactions.commit(SC, ST, third.txn, "", 9_999)).value == "SUCCESS"
    await run_pending(w.s, Processor.COMMITS, w.service)

    # The latest commit time of the writer's transactions, at the offsets after the batch.
    assert await w.writers() == {"tw": WriterMark(1_234, {0: 1_070, 1: 70})}
    assert [m.stream for m in await w.members()] == [ST]
    assert (await w.worker().run_once()).emitted == 1
    assert cut_of((await w.watermarks())[-1]) == {0: 1_070, 1: 70}

    # Without the hook (or without a writer id) no mark is noted.
    fourth = await w.s.transactions.create(SC, ST, 10_000)
    await w.s.transactions.commit(SC, ST, fourth.txn, "other", 5_000)
    await run_pending(w.s, Processor.COMMITS)
    assert set(await w.writers()) == {"tw"}


async def test_a_rolled_transaction_notes_the_position_of_the_copies(w: World) -> None:
    await make_stream(w, segments=1)
    made = await w.s.transactions.create(SC, ST, 10_000)
    txn = made.txn
    await w.s.segment_store.append(
        transaction_segment_name(qualified_segment_name(SC, ST, 0), txn.high, txn.low), 30
    )
    await scale(w, [0], [(0.0, 0.5), (0.5, 1.0)])  # epoch 1; the transaction is on epoch 0: it rolls
    assert (await w.s.transactions.commit(SC, ST, txn, "roller", 77)).value == "SUCCESS"
    await run_pending(w.s, Processor.COMMITS, w.service)

    # Epoch 2 holds the copy of segment 0 (sealed at its merged length), epoch 3 is active.
    _state, active = await w.s.stream_store.get_active_epoch(SC, ST)
    assert active.epoch == 3
    copy = segment_id(0, 2)
    info = await w.s.segment_store.get_segment_info(qualified_segment_name(SC, ST, copy))
    assert info.sealed and info.length == 30
    assert await w.writers() == {"roller": WriterMark(77, {copy: 30})}


async def test_invalid_txn_marks_are_ignored(w: World) -> None:
    await make_stream(w, segments=1)
    await w.note("tw", 5_000, {0: 0})
    made = await w.s.transactions.create(SC, ST, 10_000)
    await w.s.transactions.commit(SC, ST, made.txn, "tw", 10)  # older than the writer's mark
    await run_pending(w.s, Processor.COMMITS, w.service)
    assert (await w.s.transactions.state(SC, ST, made.txn)).value == "COMMITTED"
    assert await w.writers() == {"tw": WriterMark(5_000, {0: 0})}


async def test_a_stream_deleted_during_the_round_does_not_spoil_the_page(w: World) -> None:
    for name in ("a", "b"):
        await make_stream(w, segments=1, name=name)
        await w.note("w", 5, {0: 1}, name=name)
    page = await w.members()
    await w.s.pool.execute("DELETE FROM streams WHERE scope = $1 AND name = 'a'", SC)
    summary = await w.service.process(page, {m.bucket: w.fence_for(m.bucket) for m in page})
    assert (summary.streams, summary.emitted) == (2, 1)
    assert len(await w.watermarks("b")) == 1
