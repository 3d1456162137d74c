"""What the stream and scope calls that write a request and wait for its workflow share (update,
truncate, seal, delete): the stores they write through and the bounded wait that ends early once
their request is parked (app/services/completion.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.domain.requests import RequestKind
from app.ports import Clock, RequestQueue, StreamStore
from app.services.completion import parked_request, wait_until

# What a wait that failed or timed out says it waited for.
_AWAITED = {
    RequestKind.UPDATE_STREAM: "update of stream {scope}/{stream}",
    RequestKind.TRUNCATE_STREAM: "truncation of stream {scope}/{stream}",
    RequestKind.SEAL_STREAM: "sealing of stream {scope}/{stream}",
    RequestKind.DELETE_STREAM: "deletion of stream {scope}/{stream}",
    RequestKind.DELETE_SCOPE: "recursive deletion of scope {scope}",
}


@dataclass(frozen=True, slots=True)
class StreamWorkflows:
    streams: StreamStore
    clock: Clock
    requests: RequestQueue
    completion_timeout_s: float

    async def wait(
        self, kind: RequestKind, scope: str, stream: str, since_ms: int, done: Callable[[], Awaitable[bool]]
    ) -> None:
        """Until `done`; FinalFailure once the request of `kind` for scope/stream written at or
        after `since_ms` is parked, Timeout past the completion timeout."""
        await wait_until(
            done,
            _AWAITED[kind].format(scope=scope, stream=stream),
            timeout_s=self.completion_timeout_s,
            failed=parked_request(self.requests, scope, stream, kind, since_ms),
        )
