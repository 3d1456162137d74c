"""updateStream: the configuration is stored with its "updating" flag together with the
request (outbox); the caller waits until the workflow has applied it (§1, §5.4)."""

from __future__ import annotations

import enum

from app.domain.errors import NotFound, WriteConflict
from app.domain.names import require_present
from app.domain.records import StreamConfig, StreamState
from app.domain.requests import NewRequest, RequestKind
from app.ports import Clock, StreamStore
from app.services.completion import DEFAULT_COMPLETION_TIMEOUT_S, wait_until


class UpdateOutcome(enum.Enum):
    """UpdateStreamStatus, shared by update, truncate and seal."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STREAM_NOT_FOUND = "STREAM_NOT_FOUND"
    STREAM_SEALED = "STREAM_SEALED"


class StreamUpdates:
    def __init__(
        self,
        streams: StreamStore,
        clock: Clock,
        *,
        completion_timeout_s: float = DEFAULT_COMPLETION_TIMEOUT_S,
    ) -> None:
        self._streams = streams
        self._clock = clock
        self._timeout_s = completion_timeout_s

    async def update_stream(self, scope: str, name: str, config: StreamConfig) -> UpdateOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        config.validate()
        try:
            if (await self._streams.get_state(scope, name)).value == StreamState.SEALED:
                return UpdateOutcome.STREAM_SEALED
            record = await self._streams.get_config_record(scope, name)
            if record.value[1]:
                return UpdateOutcome.FAILURE  # another update is in progress
            request = NewRequest(RequestKind.UPDATE_STREAM, scope, name, self._clock.now_ms())
            try:
                await self._streams.set_config(scope, name, config, True, record.version, request=request)
            except WriteConflict:
                return UpdateOutcome.FAILURE
            await wait_until(
                lambda: self._is_updated(scope, name, config),
                f"update of stream {scope}/{name}",
                timeout_s=self._timeout_s,
            )
            if (await self._streams.get_state(scope, name)).value == StreamState.SEALED:
                return UpdateOutcome.STREAM_SEALED
        except NotFound:
            return UpdateOutcome.STREAM_NOT_FOUND
        return UpdateOutcome.SUCCESS

    async def _is_updated(self, scope: str, name: str, config: StreamConfig) -> bool:
        stored, updating = (await self._streams.get_config_record(scope, name)).value
        if updating:
            # Still ours in flight, or already a later update: then ours is done.
            return stored != config
        state = (await self._streams.get_state(scope, name)).value
        return not (stored == config and state == StreamState.UPDATING)
