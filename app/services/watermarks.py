"""Watermarking use cases: writers' marks (noteTimestamp, removeWriter), one watermark round
over a page of streams, the listing, and the marks a committed transaction leaves (the latest
commit time per writer).

A round reads a whole page of streams in one query, the key ranges it needs in one more (and
the gap-filling epochs in a third, only when some cut has gaps), and writes each kind of
change in one fenced statement: a process that lost a bucket writes nothing for its streams.

Each watermark goes first to the stream's `_MARK<stream>` segment, where readers read it, with
a conditional append at the offset where the previous one ends (kept on its row), and then to its
row. A retried round cannot append it twice, nor append one computed after a stale previous: the
segment's length no longer matches. When the Event landed but its row did not (a crash between
the two, a bucket lost), the next round's append fails that check and the round adopts what the
segment holds past the row as rows, so the rows catch up with what readers saw; a segment holding
nothing newer than the rows (rows written by a rows-only controller) takes the watermark at its
real end. Readers of the segment never see a lower bound repeat or go back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.domain.cluster import Fence
from app.domain.errors import DomainError, InvalidInput, NotFound, StoreUnavailable, WriteConflict
from app.domain.ids import qualified_segment_name
from app.domain.names import mark_stream_name, require_present
from app.domain.txns import TxnId
from app.domain.validation import check_writer_id, is_writer_time
from app.domain.watermarks import (
    NO_TIME,
    CutDraft,
    NoteOutcome,
    RemoveOutcome,
    RoundPlan,
    SegmentRange,
    WriterMark,
    complete_cut,
    draft_cut,
    latest_commit_times,
    needs_epoch,
    note_decision,
    plan_round,
)
from app.domain.watermarks import Watermark as WatermarkRecord
from app.ports import (
    Clock,
    MarkChange,
    MarkStream,
    StoredWatermark,
    WatermarkAppend,
    WatermarkMember,
    WatermarkStore,
)

log = logging.getLogger("pgcontroller.watermarks")

# Emitted watermarks kept per stream (Pravega keeps its mark stream's tail; readers only need
# the recent ones). 1000 rounds of 10 s is almost three hours.
RETAINED_WATERMARKS = 1000
LIST_DEFAULT_LIMIT = 100
LIST_MAX_LIMIT = RETAINED_WATERMARKS
# A note that lost a race re-reads and decides again; the watermark round's bookkeeping of a
# mark can be the other writer, which Java's in-memory bookkeeping never is.
_WRITE_ATTEMPTS = 3
_STREAMS_PER_SLICE = 10
# `_MARK` appends of one round in flight at once.
_MARK_APPENDS_IN_FLIGHT = 4


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """What one round over some streams did."""

    streams: int = 0
    emitted: int = 0
    writers_removed: int = 0
    left_bucket: int = 0  # streams with no active writer: their marks removed, membership ends
    skipped: int = 0  # streams whose bucket is not (or no longer) ours: nothing was read or written
    not_landed: int = 0  # watermarks computed but not appended: fenced, or appended by another
    adopted: int = 0  # watermarks found in a `_MARK` segment past the rows, given their rows

    def __add__(self, other: RoundSummary) -> RoundSummary:
        return RoundSummary(
            self.streams + other.streams,
            self.emitted + other.emitted,
            self.writers_removed + other.writers_removed,
            self.left_bucket + other.left_bucket,
            self.skipped + other.skipped,
            self.not_landed + other.not_landed,
            self.adopted + other.adopted,
        )


@dataclass(frozen=True, slots=True)
class _Planned:
    member: WatermarkMember
    fence: Fence
    plan: RoundPlan


class WatermarkService:
    def __init__(self, store: WatermarkStore, clock: Clock, marks: MarkStream | None = None) -> None:
        """Without `marks`, watermarks are kept as rows only (tests of the rules alone)."""
        self._store = store
        self._clock = clock
        self._marks = marks

    # --- writers: noteTimestampFromWriter, removeWriter ------------------------------------

    async def note_timestamp(
        self, scope: str, stream: str, writer: str, position: Mapping[int, int], timestamp: int
    ) -> NoteOutcome:
        """Creates or advances the writer's mark (a removed writer becomes alive again), which
        makes the stream a member of its watermark bucket. NotFound for a missing stream."""
        require_present("scope", scope)
        require_present("stream", stream)
        if not writer:
            raise InvalidInput("writer id must not be empty")
        check_writer_id(writer)
        # A time past year 9999 could never be followed by a later one: the proto's own answer
        # for a time that cannot be taken.
        if not is_writer_time(timestamp):
            return NoteOutcome.INVALID_TIME
        for _ in range(_WRITE_ATTEMPTS):
            current = await self._store.get_writer_mark(scope, stream, writer)
            outcome = note_decision(None if current is None else current.value, timestamp, position)
            if outcome is not NoteOutcome.SUCCESS:
                return outcome
            mark = WriterMark(timestamp, dict(position), alive=True)
            try:
                if current is None:
                    await self._store.create_writer_mark(scope, stream, writer, mark)
                else:
                    await self._store.update_writer_mark(scope, stream, writer, mark, current.version)
                return NoteOutcome.SUCCESS
            except (WriteConflict, NotFound):
                # Created, changed or removed (by the watermark round) meanwhile; a missing
                # stream surfaces from the next read.
                continue
        raise WriteConflict(f"mark of writer {writer!r} on {scope}/{stream} kept changing")

    async def remove_writer(self, scope: str, stream: str, writer: str) -> RemoveOutcome:
        """Marks the writer shut down; the round removes its mark later. No mark, or no stream,
        is UNKNOWN_WRITER; any other failure INTERNAL_ERROR (never STREAM_DOES_NOT_EXIST)."""
        require_present("scope", scope)
        require_present("stream", stream)
        try:
            for _ in range(_WRITE_ATTEMPTS):
                current = await self._store.get_writer_mark(scope, stream, writer)
                if current is None:
                    return RemoveOutcome.UNKNOWN_WRITER
                shut_down = WriterMark(current.value.timestamp, current.value.position, alive=False)
                try:
                    await self._store.update_writer_mark(scope, stream, writer, shut_down, current.version)
                    return RemoveOutcome.SUCCESS
                except WriteConflict:
                    continue
        except NotFound:
            return RemoveOutcome.UNKNOWN_WRITER
        except StoreUnavailable as exc:
            log.warning("removeWriter %s on %s/%s: %s", writer, scope, stream, exc)
            return RemoveOutcome.INTERNAL_ERROR
        log.warning("removeWriter %s on %s/%s: the mark kept changing", writer, scope, stream)
        return RemoveOutcome.INTERNAL_ERROR

    # --- marks from committed transactions ------------------------------------------------

    async def commit_times(self, scope: str, name: str, txns: Sequence[TxnId]) -> dict[str, int]:
        """Each writer's latest commit time among `txns`; {} when it cannot be read (marks from
        transactions are best effort, never a reason to fail a commit)."""
        try:
            return latest_commit_times(await self._store.txn_commit_times(scope, name, txns))
        except DomainError as exc:
            log.warning("reading writer marks of committed transactions on %s/%s: %s", scope, name, exc)
            return {}

    async def note_txn_marks(
        self, scope: str, name: str, times: Mapping[str, int], position: Mapping[int, int]
    ) -> None:
        for writer, commit_time in times.items():
            try:
                outcome = await self.note_timestamp(scope, name, writer, position, commit_time)
            except DomainError as exc:
                log.warning("writer mark of %s on %s/%s from a commit: %s", writer, scope, name, exc)
                continue
            if outcome is not NoteOutcome.SUCCESS:
                log.info("writer mark of %s on %s/%s from a commit: %s", writer, scope, name, outcome.value)

    # --- the periodic computation (Pravega's PeriodicWatermarking) -------------------------

    async def members(
        self, buckets: Sequence[int], bucket_count: int, after_stream_id: int, limit: int
    ) -> list[WatermarkMember]:
        return await self._store.members(buckets, bucket_count, after_stream_id, limit)

    async def watermark_stream(
        self, scope: str, stream: str, fence: Fence, bucket_count: int
    ) -> RoundSummary:
        """One stream's round (steps 1-9), under `fence`. NotFound for a missing stream."""
        member = await self._store.member(scope, stream, bucket_count)
        if member is None:
            return RoundSummary()
        return await self.process([member], {member.bucket: fence} if member.bucket == fence.bucket else {})

    async def process(
        self,
        members: Sequence[WatermarkMember],
        fences: Mapping[int, Fence | None],
        now_ms: int | None = None,
    ) -> RoundSummary:
        """Steps 2-9 for streams already read (step 1); a stream whose bucket has no fence in
        `fences` is skipped."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        planned: list[_Planned] = []
        skipped = 0
        for i, member in enumerate(members):
            await _share_the_loop(i)
            fence = fences.get(member.bucket)
            if fence is None:
                skipped += 1
                continue
            plan = plan_round(member.marks, _previous(member.latest), member.timeout_ms, now)
            planned.append(_Planned(member, fence, plan))
        computed = await self._watermarks_to_append([p for p in planned if p.plan.emit], now)
        appends, adopted = await self._append_to_mark_segments(computed, now)
        landed = await self._store.append_watermarks(appends, RETAINED_WATERMARKS)
        removed = await self._store.remove_marks(
            [
                MarkChange(p.member.stream_id, p.fence, t.writer, t.version)
                for p in planned
                for t in p.plan.inactive
            ]
        )
        await self._store.set_inactive_since(
            [
                MarkChange(p.member.stream_id, p.fence, t.writer, t.version, now)
                for p in planned
                for t in p.plan.start_tracking
            ]
            + [
                MarkChange(p.member.stream_id, p.fence, t.writer, t.version, None)
                for p in planned
                for t in p.plan.stop_tracking
            ]
        )
        return RoundSummary(
            streams=len(planned),
            emitted=len(landed),
            writers_removed=removed,
            left_bucket=sum(1 for p in planned if p.plan.leaves_bucket),
            skipped=skipped,
            not_landed=len(computed) - len(landed),
            adopted=adopted,
        )

    # --- step 9: the `_MARK` segment first, then the row ------------------------------------

    async def _append_to_mark_segments(
        self, computed: Sequence[tuple[_Planned, WatermarkAppend]], now: int
    ) -> tuple[list[WatermarkAppend], int]:
        """The rows to write: each watermark whose Event landed in its `_MARK` segment, with its
        end offset (a stream without a mark segment keeps rows only), and how many watermarks
        were adopted from segments holding more than their rows."""
        if self._marks is None:
            return [append for _, append in computed], 0
        marks = self._marks
        gate = asyncio.Semaphore(_MARK_APPENDS_IN_FLIGHT)
        adopted = 0

        async def one(p: _Planned, append: WatermarkAppend) -> WatermarkAppend | None:
            nonlocal adopted
            member = p.member
            if member.mark_segment is None:
                return append
            segment = qualified_segment_name(
                member.scope, mark_stream_name(member.stream), member.mark_segment
            )
            expected = _mark_end(member.latest)
            async with gate:
                try:
                    end = await marks.append(segment, append.watermark, expected)
                    if end is None:
                        caught_up, append_at_end = await self._catch_up(
                            p, append, marks, segment, expected, now
                        )
                        adopted += caught_up
                        return append_at_end
                except DomainError as exc:
                    # This stream waits for the next round; the others go on.
                    log.warning(
                        "watermark of %s/%s not appended to %s: %s", member.scope, member.stream, segment, exc
                    )
                    return None
            return dataclasses.replace(append, mark_offset=end)

        results = await asyncio.gather(*(one(p, append) for p, append in computed))
        return [append for append in results if append is not None], adopted

    async def _catch_up(
        self, p: _Planned, append: WatermarkAppend, marks: MarkStream, segment: str, expected: int, now: int
    ) -> tuple[int, WatermarkAppend | None]:
        """The segment does not end where the latest row says. Watermarks in it newer than that
        row (their rows were never written: a crash or a lost bucket between the append and the
        row) get their rows, in order, and this round's watermark, computed after a stale
        previous, is dropped. With nothing newer there (rows written without the segment, by a
        controller of an older version; a segment that lost its end), this round's watermark is
        appended at the segment's real end if it is newer than the segment's last one.
        Returns how many were adopted, and the row to write for an append that landed."""
        tail = await marks.read_from(segment, expected)
        latest = p.member.latest
        floor = NO_TIME if latest is None else latest.watermark.lower_time_bound
        after = 0 if latest is None else latest.seq
        adopted = 0
        for entry in tail.entries:
            if entry.watermark.lower_time_bound <= floor:
                continue  # older than a row already written
            row = WatermarkAppend(p.member.stream_id, p.fence, after, entry.watermark, now, entry.end)
            if not await self._store.append_watermarks([row], RETAINED_WATERMARKS):
                return adopted, None  # fenced, or another process caught up first
            after += 1
            adopted += 1
            floor = entry.watermark.lower_time_bound
        if adopted:
            log.info(
                "watermarks of %s/%s: %d adopted from %s past offset %d",
                p.member.scope,
                p.member.stream,
                adopted,
                segment,
                expected,
            )
            return adopted, None
        last = tail.entries[-1].watermark.lower_time_bound if tail.entries else NO_TIME
        if append.watermark.lower_time_bound <= last:
            return 0, None
        end = await marks.append(segment, append.watermark, tail.end)
        return 0, None if end is None else dataclasses.replace(append, mark_offset=end)

    async def _watermarks_to_append(
        self, emitting: Sequence[_Planned], now: int
    ) -> list[tuple[_Planned, WatermarkAppend]]:
        """Step 8: the cut of each emitting stream, with two batched reads for all of them."""
        ranges = await self._store.segment_ranges(
            sorted(
                {
                    (p.member.stream_id, segment)
                    for p in emitting
                    for t in p.plan.active
                    for segment in t.mark.position
                }
            )
        )
        drafts: list[tuple[_Planned, CutDraft]] = []
        for i, p in enumerate(emitting):
            await _share_the_loop(i)
            stream_id = p.member.stream_id
            # A segment the stream never had holds nothing a reader could read: left out.
            positions = [
                {
                    ranges[(stream_id, segment)]: offset
                    for segment, offset in t.mark.position.items()
                    if (stream_id, segment) in ranges
                }
                for t in p.plan.active
            ]
            draft = draft_cut(positions, _previous(p.member.latest))
            if draft.cut:
                drafts.append((p, draft))
        epochs = await self._store.epoch_segments(
            sorted(
                {
                    (p.member.stream_id, draft.highest_epoch)
                    for p, draft in drafts
                    if draft.highest_epoch is not None and needs_epoch(draft)
                }
            )
        )
        appends: list[tuple[_Planned, WatermarkAppend]] = []
        for i, (p, draft) in enumerate(drafts):
            await _share_the_loop(i)
            epoch_segments: tuple[SegmentRange, ...] = ()
            epoch = draft.highest_epoch
            if epoch is not None and needs_epoch(draft):
                if (p.member.stream_id, epoch) not in epochs:
                    continue  # the stream went away under us: nothing to emit
                epoch_segments = epochs[(p.member.stream_id, epoch)]
            cut = complete_cut(draft, epoch_segments)
            latest = p.member.latest
            appends.append(
                (
                    p,
                    WatermarkAppend(
                        stream_id=p.member.stream_id,
                        fence=p.fence,
                        after_seq=0 if latest is None else latest.seq,
                        watermark=WatermarkRecord(p.plan.lower_time_bound, p.plan.upper_time_bound, cut),
                        created_at=now,
                    ),
                )
            )
        return appends

    # --- listing --------------------------------------------------------------------------

    async def list_watermarks(
        self, scope: str, stream: str, limit: int = LIST_DEFAULT_LIMIT
    ) -> list[StoredWatermark]:
        """The most recent watermarks, newest first. NotFound for a missing stream."""
        require_present("scope", scope)
        require_present("stream", stream)
        if not 0 < limit <= LIST_MAX_LIMIT:
            raise InvalidInput(f"limit must be within 1..{LIST_MAX_LIMIT}, got {limit}")
        return await self._store.list_watermarks(scope, stream, limit)


async def _share_the_loop(i: int) -> None:
    """A round runs on the event loop that serves RPCs: every few streams of pure computation
    it lets them in, so a page never holds the loop for more than a millisecond or two."""
    if i % _STREAMS_PER_SLICE == _STREAMS_PER_SLICE - 1:
        await asyncio.sleep(0)


def _previous(latest: StoredWatermark | None) -> WatermarkRecord | None:
    return None if latest is None else latest.watermark


def _mark_end(latest: StoredWatermark | None) -> int:
    """Where the next Event must land: after the latest watermark's. Without a row naming an
    offset, the segment is taken to be empty; if it is not, the append fails its check and the
    catch-up finds where it really ends."""
    if latest is None or latest.mark_offset is None:
        return 0
    return latest.mark_offset
