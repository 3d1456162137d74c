"""Create requests: finish a stream whose createStream was cut off after its first write (client
timeout, database outage, crash), so no stream stays CREATING waiting for a client to retry.

The creation sweeper files one for a stream left CREATING too long; it runs in the stream's
request order, so a delete queued before it has removed the stream and one queued after it
(a stream left CREATING may be deleted) is not raced. Finishing is idempotent, so a call still
at work on the same stream does no harm.
"""

from __future__ import annotations

from typing import Protocol

from app.domain.records import StreamState
from app.domain.requests import Request, RequestKind
from app.ports import RequestQueue, StreamStore
from workers.runner import MarkStarted


class CreationFinisher(Protocol):
    async def finish_interrupted_creation(self, scope: str, name: str, creation_time: int) -> None: ...


class CreateStreamHandler:
    def __init__(self, finisher: CreationFinisher, streams: StreamStore, requests: RequestQueue) -> None:
        self._finisher = finisher
        self._streams = streams
        self._requests = requests

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        scope, name = request.scope, request.stream
        # NotFound (the stream was deleted meanwhile) ends the request in the runner.
        if (await self._streams.get_state(scope, name)).value != StreamState.CREATING:
            return  # finished by its call, a retry, or a concurrent create
        creation_time = int(request.payload["creation_time"])
        if await self._streams.get_creation_time(scope, name) != creation_time:
            return  # a re-created stream: not the creation this request is about
        if await self._requests.has_pending(scope, name, RequestKind.DELETE_STREAM):
            return  # the delete queued behind us removes it: nothing to finish
        await mark_started()
        await self._finisher.finish_interrupted_creation(scope, name, creation_time)
