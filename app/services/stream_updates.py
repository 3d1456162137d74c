"""updateStream: the configuration is stored with its "updating" flag together with the
request (outbox); the caller waits until the workflow has applied it (ACTIVE -> UPDATING ->
ACTIVE, scaling when the segment count must change)."""

from __future__ import annotations

import enum

from app.domain.errors import FinalFailure, NotFound, WriteConflict
from app.domain.names import require_present
from app.domain.records import StreamConfig, StreamState
from app.domain.requests import NewRequest, RequestKind, config_payload
from app.domain.scale_rules import ranges_replace_sealed, segment_count_update
from app.metrics.record import operation, outcome_is
from app.services.stream_workflow import StreamWorkflows

# A seal requested or done: the stream never returns to ACTIVE, so an update or truncation
# cannot run on it any more (its workflow ends such a request unapplied, or as Pravega's does).
CLOSED_BY_SEAL = frozenset({StreamState.SEALING, StreamState.SEALED})


class UpdateOutcome(enum.Enum):
    """UpdateStreamStatus, shared by update, truncate and seal."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STREAM_NOT_FOUND = "STREAM_NOT_FOUND"
    STREAM_SEALED = "STREAM_SEALED"


class StreamUpdates:
    def __init__(self, workflows: StreamWorkflows) -> None:
        self._workflows = workflows
        self._streams = workflows.streams
        self._clock = workflows.clock

    @operation("stream", "updated", "update_failed", outcome_is(UpdateOutcome.SUCCESS))
    async def update_stream(self, scope: str, name: str, config: StreamConfig) -> UpdateOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        config.validate()
        since = self._clock.now_ms()
        try:
            if (await self._streams.get_state(scope, name)).value in CLOSED_BY_SEAL:
                return UpdateOutcome.STREAM_SEALED
            record = await self._streams.get_config_record(scope, name)
            if record.value[1]:
                return UpdateOutcome.FAILURE  # another update is in progress
            if not await self._segment_count_reachable(scope, name, config):
                return UpdateOutcome.FAILURE
            request = NewRequest(
                RequestKind.UPDATE_STREAM,
                scope,
                name,
                self._clock.now_ms(),
                payload=config_payload(record.value[0]),
            )
            try:
                await self._streams.set_config(scope, name, config, True, record.version, request=request)
            except WriteConflict:
                return UpdateOutcome.FAILURE
            await self._workflows.wait(
                RequestKind.UPDATE_STREAM, scope, name, since, lambda: self._is_updated(scope, name, config)
            )
            # A seal that overtook the update: its workflow ended it unapplied.
            if (await self._streams.get_state(scope, name)).value in CLOSED_BY_SEAL:
                return UpdateOutcome.STREAM_SEALED
        except FinalFailure:
            return UpdateOutcome.FAILURE  # parked: the stream is ACTIVE again, not updating
        except NotFound:
            return UpdateOutcome.STREAM_NOT_FOUND
        return UpdateOutcome.SUCCESS

    async def _segment_count_reachable(self, scope: str, name: str, config: StreamConfig) -> bool:
        """Whether the scale this update implies can pass the exact range check (uniform ranges for
        n = 49 and a few others end at 0.9999999999999999, not 1.0, and Pravega's update would
        never complete)."""
        _state, active = await self._streams.get_active_epoch(scope, name)
        ranges = segment_count_update(config, active)
        return ranges is None or ranges_replace_sealed(active, [s.id for s in active.segments], ranges)

    async def _is_updated(self, scope: str, name: str, config: StreamConfig) -> bool:
        stored, updating = (await self._streams.get_config_record(scope, name)).value
        if updating:
            # Still ours in flight, or already a later update: then ours is done.
            return stored != config
        state = (await self._streams.get_state(scope, name)).value
        return not (stored == config and state == StreamState.UPDATING)
