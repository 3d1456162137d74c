"""sealStream: SEALING is set together with the request (outbox), retried while the stream
is busy (about 30 s, as Pravega), then the caller waits for SEALED."""

from __future__ import annotations

import asyncio

from app.domain.errors import FinalFailure, NotFound, WriteConflict
from app.domain.names import require_present
from app.domain.records import StreamState
from app.domain.requests import NewRequest, RequestKind
from app.domain.states import is_allowed
from app.metrics.record import operation, outcome_is
from app.services.stream_updates import UpdateOutcome
from app.services.stream_workflow import StreamWorkflows

SEAL_ATTEMPTS = 10


class Sealing:
    def __init__(self, workflows: StreamWorkflows, *, busy_first_s: float, busy_cap_s: float = 10.0) -> None:
        self._workflows = workflows
        self._streams = workflows.streams
        self._clock = workflows.clock
        self._busy = (busy_first_s, busy_cap_s)

    @operation("stream", "sealed", "seal_failed", outcome_is(UpdateOutcome.SUCCESS))
    async def seal_stream(self, scope: str, name: str) -> UpdateOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        since = self._clock.now_ms()
        try:
            if not await self._request_sealing(scope, name):
                return UpdateOutcome.FAILURE
            await self._workflows.wait(
                RequestKind.SEAL_STREAM, scope, name, since, lambda: self._is_sealed(scope, name)
            )
        except FinalFailure:
            return UpdateOutcome.FAILURE  # parked: the stream is ACTIVE again
        except NotFound:
            return UpdateOutcome.STREAM_NOT_FOUND
        return UpdateOutcome.SUCCESS

    async def _request_sealing(self, scope: str, name: str) -> bool:
        delay_s, cap_s = self._busy
        for _ in range(SEAL_ATTEMPTS):
            current = await self._streams.get_state(scope, name)
            if current.value in (StreamState.SEALING, StreamState.SEALED):
                return True  # requested already: its request is queued or done
            if is_allowed(current.value, StreamState.SEALING):
                request = NewRequest(RequestKind.SEAL_STREAM, scope, name, self._clock.now_ms())
                try:
                    await self._streams.set_state(
                        scope, name, StreamState.SEALING, current.version, request=request
                    )
                    return True
                except WriteConflict:
                    continue
            # Busy (scaling, updating, ...) or still being created: try again a little later.
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, cap_s)
        return False

    async def _is_sealed(self, scope: str, name: str) -> bool:
        return (await self._streams.get_state(scope, name)).value == StreamState.SEALED
