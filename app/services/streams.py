"""Stream creation and stream queries (configuration, existence, listings).

Creation always finishes: the metadata lands in CREATING in one transaction (that row is the
durable intent); the call then creates segments and the mark stream (idempotent) and moves the
state to ACTIVE. Cut off anywhere (client timeout, outage, crash), the stream is finished by a
create request the controller files for a stream left CREATING too long (workers/creation_sweeper)
or by a retry or a concurrent create of the same name.
"""

from __future__ import annotations

import enum

from app.domain.errors import NotFound, WriteConflict
from app.domain.ids import qualified_segment_name
from app.domain.limits import SEGMENTS_PER_BATCH
from app.domain.names import (
    is_internal_stream,
    is_valid_scope_or_stream_name,
    mark_stream_name,
    require_present,
)
from app.domain.records import EpochRecord, ScalingPolicy, StreamConfig, StreamState
from app.metrics.record import operation, outcome_is
from app.ports import Clock, SegmentStore, StreamCreation, StreamStore
from app.services.paging import PAGE_LIMIT, Page, decode_token, page_of

_ACTIVATION_ATTEMPTS = 5


class CreateStreamOutcome(enum.Enum):
    SUCCESS = "SUCCESS"
    EXISTS = "EXISTS"
    SCOPE_NOT_FOUND = "SCOPE_NOT_FOUND"
    INVALID_NAME = "INVALID_NAME"


class StreamService:
    def __init__(self, streams: StreamStore, segment_store: SegmentStore, clock: Clock) -> None:
        self._streams = streams
        self._segment_store = segment_store
        self._clock = clock

    @operation("stream", "created", "create_failed", outcome_is(CreateStreamOutcome.SUCCESS))
    async def create_stream(
        self, scope: str, name: str, config: StreamConfig, creation_time: int | None = None
    ) -> CreateStreamOutcome:
        """SUCCESS for the one call that wrote the stream (or a retry naming its `creation_time`),
        EXISTS for the others, once the stream is ACTIVE whoever finished it."""
        require_present("scope", scope)
        require_present("stream", name)
        if not is_valid_scope_or_stream_name(name):
            return CreateStreamOutcome.INVALID_NAME
        config.validate()
        timestamp = self._clock.now_ms() if creation_time is None else creation_time
        try:
            creation = await self._streams.create_stream_metadata(scope, name, config, timestamp)
        except NotFound:
            return CreateStreamOutcome.SCOPE_NOT_FOUND
        if not creation.created and creation.state != StreamState.CREATING:
            return CreateStreamOutcome.EXISTS
        await self._finish_creation(scope, name, creation, with_mark_stream=True)
        # Concurrent callers share a millisecond often enough: only an explicit retry's
        # timestamp names the creation it repeats.
        if creation.created or (creation_time is not None and creation.creation_time == creation_time):
            return CreateStreamOutcome.SUCCESS
        return CreateStreamOutcome.EXISTS

    async def finish_interrupted_creation(self, scope: str, name: str, creation_time: int) -> None:
        """Finishes the stream created at `creation_time` if it is still CREATING (a create cut
        off after its first write); nothing when it is ACTIVE already, gone, or re-created since.
        Raises NotFound when the stream is gone."""
        creation = await self._streams.get_creation(scope, name)
        if creation.creation_time != creation_time or creation.state != StreamState.CREATING:
            return
        await self._finish_creation(scope, name, creation, with_mark_stream=True)

    async def _finish_creation(
        self, scope: str, name: str, creation: StreamCreation, *, with_mark_stream: bool
    ) -> None:
        await self._create_segments(scope, name, creation.config, creation.epoch_zero)
        if with_mark_stream:
            await self._create_mark_stream(scope, name, creation.creation_time)
        await self._activate(scope, name, index_tags=not is_internal_stream(name))

    async def _create_segments(self, scope: str, name: str, config: StreamConfig, epoch: EpochRecord) -> None:
        # In batches: one round trip per batch instead of per segment (10,000 segments took
        # 4.4 s one by one), and each batch an await so other clients are served in between.
        segments = epoch.segments
        for start in range(0, len(segments), SEGMENTS_PER_BATCH):
            await self._segment_store.create_segments(
                [
                    qualified_segment_name(scope, name, segment.id)
                    for segment in segments[start : start + SEGMENTS_PER_BATCH]
                ],
                config.scaling.scale_type,
                config.scaling.target_rate,
                config.rollover_size_bytes,
            )

    async def _create_mark_stream(self, scope: str, stream: str, creation_time: int) -> None:
        mark = mark_stream_name(stream)
        creation = await self._streams.create_stream_metadata(
            scope, mark, StreamConfig(ScalingPolicy.fixed(1)), creation_time
        )
        if creation.state == StreamState.CREATING:
            await self._finish_creation(scope, mark, creation, with_mark_stream=False)

    async def _activate(self, scope: str, name: str, *, index_tags: bool) -> None:
        for _ in range(_ACTIVATION_ATTEMPTS):
            state = await self._streams.get_state(scope, name)
            if state.value != StreamState.CREATING:
                return
            try:
                await self._streams.activate_created_stream(scope, name, state.version, index_tags=index_tags)
                return
            except WriteConflict:
                continue
        raise WriteConflict(f"stream {scope}/{name} could not be activated: its state kept changing")

    async def get_config(self, scope: str, name: str) -> StreamConfig:
        require_present("scope", scope)
        require_present("stream", name)
        return (await self._streams.get_config(scope, name)).value

    async def get_configs(self, scope: str, names: list[str]) -> dict[str, StreamConfig]:
        """The configurations of the named streams of `scope` that exist (one read for all)."""
        require_present("scope", scope)
        return await self._streams.get_configs(scope, names)

    async def get_state(self, scope: str, name: str) -> StreamState:
        return (await self._streams.get_state(scope, name)).value

    async def stream_exists(self, scope: str, name: str) -> bool:
        require_present("scope", scope)
        require_present("stream", name)
        return await self._streams.stream_exists(scope, name)

    async def list_streams(self, scope: str, token: str, limit: int = PAGE_LIMIT) -> Page:
        """Raises NotFound when the scope is missing."""
        require_present("scope", scope)
        names = await self._streams.list_streams(scope, decode_token(token), min(limit, PAGE_LIMIT))
        return page_of(names, token)

    async def list_streams_for_tag(self, scope: str, tag: str, token: str, limit: int = PAGE_LIMIT) -> Page:
        require_present("scope", scope)
        names = await self._streams.list_streams_for_tag(
            scope, tag, decode_token(token), min(limit, PAGE_LIMIT)
        )
        return page_of(names, token)
