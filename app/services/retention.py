"""Retention: one stream's retention cycle (as Pravega's controller runs it), and the subscribers
whose published cuts bound consumption-based retention.

A cycle records the tail cut when due, chooses a truncation cut and starts the truncation the
way truncateStream starts it (the updating truncation record and its request in one
transaction; the request workers do the rest), without waiting for it. Every write of a cycle
carries the bucket's Fence: once another process claimed the bucket, nothing more is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.domain.cluster import Fence
from app.domain.errors import InvalidInput, NotFound, WriteConflict
from app.domain.ids import qualified_segment_name
from app.domain.names import require_present
from app.domain.records import (
    SEALED_SIZE_SHARD_EPOCHS,
    SegmentRecord,
    StreamState,
    TruncationRecord,
    Versioned,
)
from app.domain.requests import NewRequest, RequestKind, truncation_payload
from app.domain.retention import (
    CutOrdering,
    StreamCutRecord,
    SubscriberRecord,
    choose_truncation_cut,
    epochs_named,
    newest_at_or_before,
    purge_up_to,
    reader_group_uuid,
    should_record,
    subscribers_lower_bound,
)
from app.domain.streamcuts import (
    CutVerdict,
    EpochWindow,
    cut_epoch_range,
    cut_equal_or_after,
    is_stream_cut_valid,
    new_truncation_span,
    next_truncation,
    stream_cut_span,
    truncation_epoch_range,
)
from app.metrics.record import operation, outcome_is
from app.ports import (
    Clock,
    RetentionContext,
    RetentionStore,
    RetentionWrite,
    SegmentStore,
    StreamStore,
)

log = logging.getLogger("pgcontroller.retention")

SUBSCRIBER_UPDATE_ATTEMPTS = 10  # StreamMetadataTasks.SUBSCRIBER_OPERATION_RETRIES

_NOT_RETAINED = frozenset({StreamState.CREATING, StreamState.SEALING, StreamState.SEALED})


class TruncationStart(enum.Enum):
    STARTED = "started"
    ALREADY_THERE = "already_there"  # the stream is truncated at exactly that cut: nothing to do
    BUSY = "busy"  # a truncation is in progress; the next cycle chooses again
    BEHIND = "behind"  # behind the current truncation point (e.g. a later manual one): ignored
    INVALID = "invalid"  # not a valid cut (a lower bound of odd subscriber cuts): ignored


@dataclass(frozen=True, slots=True)
class CycleOutcome:
    recorded: StreamCutRecord | None = None
    truncation: TruncationStart | None = None  # None: no cut was chosen
    truncated_at: dict[int, int] | None = None
    purged_up_to: int | None = None  # recording time of the newest purged record
    fenced: bool = False
    skipped: str | None = None  # why the stream was not looked at


class _Fenced(Exception):
    """The bucket's generation moved on mid-cycle: abandon the cycle, write nothing more."""


class _Epochs:
    """The stream's epochs fetched so far, widened on demand and always ending at the active one."""

    def __init__(self, streams: StreamStore, scope: str, name: str, active: int) -> None:
        self._streams = streams
        self._scope, self._name, self._active = scope, name, active
        self._window: EpochWindow | None = None
        self._ordering: CutOrdering | None = None
        self._sizes: dict[int, int] | None = None

    async def ordering(self, low: int) -> CutOrdering:
        low = max(0, min(low, self._active))
        if self._window is None or self._window.low > low:
            records = await self._streams.get_epochs(self._scope, self._name, low, self._active)
            self._window = EpochWindow.of(records)
            if not self._window.covers(low) or not self._window.covers(self._active):
                raise NotFound(f"epochs {low}..{self._active} of {self._scope}/{self._name} not found")
            self._ordering = CutOrdering(self._window)
            self._sizes = None
        assert self._ordering is not None
        return self._ordering

    async def sealed_sizes(self) -> dict[int, int]:
        if self._sizes is None:
            assert self._window is not None
            sizes: dict[int, int] = {}
            first, last = self._window.low, self._window.high
            for shard in range(first // SEALED_SIZE_SHARD_EPOCHS, last // SEALED_SIZE_SHARD_EPOCHS + 1):
                found = await self._streams.get_sealed_size_shard(self._scope, self._name, shard)
                if found is not None:
                    sizes.update(found.value)
            self._sizes = sizes
        return self._sizes


class RetentionService:
    def __init__(
        self,
        streams: StreamStore,
        retention: RetentionStore,
        segment_store: SegmentStore,
        clock: Clock,
        *,
        frequency_ms: int,
    ) -> None:
        if frequency_ms <= 0:
            raise InvalidInput(f"the retention frequency must be positive, got {frequency_ms} ms")
        self._streams = streams
        self._retention = retention
        self._segments = segment_store
        self._clock = clock
        self._frequency_ms = frequency_ms

    @property
    def frequency_ms(self) -> int:
        return self._frequency_ms

    async def run_cycle(self, scope: str, name: str, fence: Fence) -> CycleOutcome:
        """Records the tail cut when due, chooses the truncation cut, starts the truncation and purges
        the retention set up to it, for one stream. Raises the store's errors (the caller retries)."""
        context = await self._retention.get_context(scope, name)
        if context.policy is None:
            return CycleOutcome(skipped="no retention policy")
        if context.state in _NOT_RETAINED:
            return CycleOutcome(skipped=f"stream is {context.state.value}")
        try:
            return await self._cycle(scope, name, context, fence)
        except _Fenced:
            return CycleOutcome(fenced=True)

    async def _cycle(self, scope: str, name: str, context: RetentionContext, fence: Fence) -> CycleOutcome:
        assert context.policy is not None
        now = self._clock.now_ms()
        records = list(context.records)
        latest = records[-1] if records else None
        cuts = [r.stream_cut for r in records] + [c for c in context.subscriber_cuts if c]
        named = epochs_named(cuts)
        epochs = _Epochs(self._streams, scope, name, context.active_epoch)

        recorded: StreamCutRecord | None = None
        if should_record(latest, now, self._frequency_ms):
            # Measured on from the latest record; the very first one from the epoch-0 head.
            low = 0 if latest is None or named is None else named[0]
            ordering = await epochs.ordering(low)
            tail = await self._tail_cut(scope, name, ordering.window.record(context.active_epoch).segments)
            size = ordering.size_till(tail, await epochs.sealed_sizes(), reference=latest)
            candidate = StreamCutRecord(now, size, tail)
            written = await self._retention.add_record(scope, name, candidate, fence)
            if written is RetentionWrite.FENCED:
                raise _Fenced
            if written is RetentionWrite.WRITTEN:
                records.append(candidate)
                recorded = candidate
        if not records:
            return CycleOutcome(recorded=recorded)

        ordering = await epochs.ordering(context.active_epoch if named is None else named[0])
        lower_bound = subscribers_lower_bound(context.subscriber_cuts, ordering.window)
        lower_bound_size: int | None = None
        if lower_bound:
            reference = newest_at_or_before(lower_bound, records, ordering)
            if reference is None:
                ordering = await epochs.ordering(0)
            lower_bound_size = ordering.size_till(
                lower_bound, await epochs.sealed_sizes(), reference=reference
            )
        chosen = choose_truncation_cut(context.policy, records, now, ordering, lower_bound, lower_bound_size)
        if chosen is None:
            return CycleOutcome(recorded=recorded)

        started = await self._start_truncation(scope, name, context.truncation, chosen, epochs, now, fence)
        purged: int | None = None
        if started in (TruncationStart.STARTED, TruncationStart.ALREADY_THERE):
            up_to = purge_up_to(chosen, records, ordering)
            if up_to is not None:
                gone = await self._retention.purge_records(scope, name, up_to.recording_time, fence)
                if gone is RetentionWrite.FENCED:
                    raise _Fenced
                purged = up_to.recording_time
        return CycleOutcome(recorded=recorded, truncation=started, truncated_at=chosen, purged_up_to=purged)

    async def _tail_cut(self, scope: str, name: str, segments: Iterable[SegmentRecord]) -> dict[int, int]:
        """The write offset of every active segment, asked of the segment store."""
        ids = sorted(s.id for s in segments)
        infos = await asyncio.gather(
            *(self._segments.get_segment_info(qualified_segment_name(scope, name, s)) for s in ids)
        )
        return {segment: info.length for segment, info in zip(ids, infos, strict=True)}

    async def _start_truncation(
        self,
        scope: str,
        name: str,
        previous: Versioned[TruncationRecord],
        cut: dict[int, int],
        epochs: _Epochs,
        now: int,
        fence: Fence,
    ) -> TruncationStart:
        """truncateStream's first step (app/services/truncation.py), fenced and not waited for."""
        current = previous.value
        if current.updating:
            return TruncationStart.BUSY
        if current.stream_cut == cut:
            return TruncationStart.ALREADY_THERE
        low, _high = truncation_epoch_range(current, cut)
        ordering = await epochs.ordering(low)
        window = ordering.window
        span = new_truncation_span(current, cut, window)
        if span is CutVerdict.INVALID:
            return TruncationStart.INVALID
        if span is CutVerdict.BEHIND:
            return TruncationStart.BEHIND
        record = next_truncation(current, cut, span, window, await epochs.sealed_sizes())
        request = NewRequest(
            RequestKind.TRUNCATE_STREAM, scope, name, now, payload=truncation_payload(current)
        )
        written = await self._retention.start_truncation(
            scope, name, record, previous.version, request, fence
        )
        if written is RetentionWrite.FENCED:
            raise _Fenced
        log.info("retention of %s/%s: truncating at %s", scope, name, cut)
        return TruncationStart.STARTED


# --- subscribers ----------------------------------------------------------------------------------


class SubscriberUpdate(enum.Enum):
    """updateSubscriberStreamCut's statuses, in the order Pravega checks them."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STREAM_NOT_FOUND = "STREAM_NOT_FOUND"
    SUBSCRIBER_NOT_FOUND = "SUBSCRIBER_NOT_FOUND"
    STREAM_CUT_NOT_VALID = "STREAM_CUT_NOT_VALID"
    GENERATION_MISMATCH = "GENERATION_MISMATCH"


class SubscriberService:
    def __init__(self, streams: StreamStore, retention: RetentionStore, clock: Clock) -> None:
        self._streams = streams
        self._retention = retention
        self._clock = clock

    async def list_subscribers(self, scope: str, stream: str) -> list[str]:
        """Subscriber names by name; NotFound for a missing stream."""
        require_present("scope", scope)
        require_present("stream", stream)
        return [s.value.subscriber for s in await self._retention.list_subscribers(scope, stream)]

    @operation(
        "stream",
        "update_subscriber_streamcut",
        "update_subscriber_streamcut_failed",
        outcome_is(SubscriberUpdate.SUCCESS),
    )
    async def update_subscriber_stream_cut(
        self,
        scope: str,
        stream: str,
        subscriber: str,
        reader_group_id: str,
        generation: int,
        cut: Mapping[int, int],
    ) -> SubscriberUpdate:
        require_present("scope", scope)
        require_present("stream", stream)
        for _ in range(SUBSCRIBER_UPDATE_ATTEMPTS):
            try:
                current = await self._retention.get_subscriber(scope, stream, subscriber)
            except NotFound:
                return SubscriberUpdate.STREAM_NOT_FOUND
            if current is None or reader_group_uuid(reader_group_id) != current.value.reader_group_id:
                return SubscriberUpdate.SUBSCRIBER_NOT_FOUND
            if current.value.generation != generation:
                return SubscriberUpdate.GENERATION_MISMATCH
            try:
                if not await self._moves_forward(scope, stream, cut, current.value.truncation_stream_cut):
                    return SubscriberUpdate.STREAM_CUT_NOT_VALID
                updated = dataclasses.replace(
                    current.value, truncation_stream_cut=dict(cut), update_time=self._clock.now_ms()
                )
                await self._retention.set_subscriber(scope, stream, updated, current.version)
            except (WriteConflict, NotFound):
                continue  # changed or removed meanwhile: decide again from a fresh read
            return SubscriberUpdate.SUCCESS
        return SubscriberUpdate.FAILURE

    async def _moves_forward(
        self, scope: str, stream: str, cut: Mapping[int, int], previous: Mapping[int, int]
    ) -> bool:
        """A valid cut (one consistent position across the key space) and not behind the subscriber's
        previous cut (no common segment at a lower offset, no overlapping one of an older epoch)."""
        if not cut:
            return False
        low, high = cut_epoch_range(cut)
        if previous:
            old_low, old_high = cut_epoch_range(previous)
            low, high = min(low, old_low), max(high, old_high)
        fetched = await self._streams.get_epochs(scope, stream, low, high)
        if not fetched:
            return False  # ids of epochs the stream never had
        window = EpochWindow.of(fetched)
        if not window.covers(low) or not window.covers(high):
            return False
        try:
            if not is_stream_cut_valid(cut, window):
                return False
            if not previous:
                return True
            return cut_equal_or_after(
                cut, stream_cut_span(cut, window), previous, stream_cut_span(previous, window)
            )
        except InvalidInput:
            return False

    async def add_subscriber(
        self, scope: str, stream: str, subscriber: str, reader_group_id: uuid.UUID, generation: int
    ) -> None:
        """Registers the reader group on the stream (no cut yet); an existing subscriber only
        has its generation raised, never lowered, keeping its cut (addSubscriber)."""
        for _ in range(SUBSCRIBER_UPDATE_ATTEMPTS):
            current = await self._retention.get_subscriber(scope, stream, subscriber)
            now = self._clock.now_ms()
            try:
                if current is None:
                    record = SubscriberRecord(subscriber, reader_group_id, generation, {}, now)
                    if await self._retention.insert_subscriber(scope, stream, record):
                        return
                    continue  # added concurrently: look again
                if current.value.generation >= generation:
                    return
                raised = dataclasses.replace(
                    current.value, reader_group_id=reader_group_id, generation=generation, update_time=now
                )
                await self._retention.set_subscriber(scope, stream, raised, current.version)
                return
            except WriteConflict:
                continue
        raise WriteConflict(f"subscriber {subscriber} of {scope}/{stream} kept changing")

    async def remove_subscriber(self, scope: str, stream: str, subscriber: str, generation: int) -> bool:
        """Removes the subscriber unless it was re-registered with a newer generation
        (deleteSubscriber); False when nothing was removed."""
        for _ in range(SUBSCRIBER_UPDATE_ATTEMPTS):
            current = await self._retention.get_subscriber(scope, stream, subscriber)
            if current is None:
                return False
            if generation < current.value.generation:
                log.warning(
                    "not removing subscriber %s of %s/%s: generation %d is older than %d",
                    subscriber,
                    scope,
                    stream,
                    generation,
                    current.value.generation,
                )
                return False
            try:
                return await self._retention.delete_subscriber(scope, stream, subscriber, current.version)
            except WriteConflict:
                continue
        raise WriteConflict(f"subscriber {subscriber} of {scope}/{stream} kept changing")
