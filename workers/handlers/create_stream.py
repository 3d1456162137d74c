"""Create requests: finish a stream whose createStream was cut off after its first write (client
timeout, database outage, crash), so no stream stays CREATING waiting for a client to retry.

The call that wrote the stream normally finishes it within milliseconds, and its activation
retires this request; the worker stands back for `takeover_after_s` so the two rarely do the
same (idempotent) work twice, then finishes the stream itself, in the stream's request order.
"""

from __future__ import annotations

from typing import Protocol

from app.domain.records import StreamState
from app.domain.requests import Request, RequestKind
from app.ports import Clock, RequestQueue, StreamStore
from workers.runner import MarkStarted, NotDueYet


class CreationFinisher(Protocol):
    async def finish_interrupted_creation(self, scope: str, name: str, creation_time: int) -> None: ...


class CreateStreamHandler:
    def __init__(
        self,
        finisher: CreationFinisher,
        streams: StreamStore,
        requests: RequestQueue,
        clock: Clock,
        *,
        takeover_after_s: float,
    ) -> None:
        self._finisher = finisher
        self._streams = streams
        self._requests = requests
        self._clock = clock
        self._takeover_after_ms = int(takeover_after_s * 1000)

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        # One read in the common case: the call finished while we were being dispatched.
        # (NotFound, a deleted stream, ends the request in the runner.)
        if (await self._streams.get_state(scope, name)).value != StreamState.CREATING:
            return
        if self._clock.now_ms() - request.created_at < self._takeover_after_ms:
            raise NotDueYet(f"stream {scope}/{name} is still being created by its call")
        creation_time = int(request.payload["creation_time"])
        if await self._streams.get_creation_time(scope, name) != creation_time:
            return  # a re-created stream: its own request finishes it
        if await self._requests.has_pending(scope, name, RequestKind.DELETE_STREAM):
            return  # a stream left CREATING may be deleted: the delete queued behind us wins
        await mark_started()
        await self._finisher.finish_interrupted_creation(scope, name, creation_time)
