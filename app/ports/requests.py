"""The request queue port: the durable queue of workflow requests, consumed per bucket, each
row deleted only once its workflow completed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.domain.cluster import Fence
from app.domain.records import Versioned
from app.domain.requests import NewRequest, Processor, Request, RequestKind


class RequestQueue(Protocol):
    """The durable request queue. Rows are deleted only once their workflow completed."""

    async def enqueue(self, request: NewRequest) -> int: ...

    async def pending(
        self,
        processor: Processor,
        buckets: Sequence[int],
        exclude: Sequence[int],
        limit: int,
        *,
        first_per_key: bool = False,
    ) -> list[Request]:
        """Queued requests in id order; with `first_per_key`, only each key's oldest."""
        ...

    async def get(self, request_id: int) -> Request | None: ...

    async def postpone(
        self, request: Request, not_before: int, error: str | None, *, failed: bool = False
    ) -> Request:
        """`failed`: the postponement follows a failure and counts towards the attempts cap."""
        ...

    async def mark_started(self, request: Request) -> Request: ...

    async def ack(self, request_id: int, fence: Fence | None = None) -> None:
        """Idempotent. With a fence, deletes only while the fence's generation still owns the
        bucket: a takeover since then leaves the request to the new owner."""
        ...

    async def pending_ids_for_key(self, processor: Processor, scope: str, stream: str) -> list[int]:
        """Ids of the key's queued requests of `processor`, oldest first."""
        ...

    async def ack_many(self, request_ids: Sequence[int], fence: Fence | None = None) -> None:
        """Acknowledges requests another request's run has done the work of; fenced like `ack`."""
        ...

    async def park(self, request_id: int, error: str, parked_at: int, fence: Fence | None = None) -> bool:
        """Takes a finally failed request out of its stream's queue, keeping it with its error;
        fenced like `ack`. False when nothing was parked."""
        ...

    async def list_parked(self, after_id: int, limit: int) -> list[Request]: ...

    async def parked_since(self, scope: str, stream: str, kind: RequestKind, since_ms: int) -> Request | None:
        """The latest request of the key and kind parked at or after `since_ms`."""
        ...

    async def unpark(self, request_id: int) -> bool:
        """Puts a parked request back into its stream's queue, due now; False when no such
        parked request exists."""
        ...

    async def drop_parked(self, request_id: int) -> bool:
        """Deletes a parked request; False when no such parked request exists."""
        ...

    async def has_pending(self, scope: str, stream: str, kind: RequestKind) -> bool: ...

    async def get_waiting_processor(self, scope: str, stream: str) -> Versioned[str] | None: ...

    async def set_waiting_processor(self, scope: str, stream: str, processor: Processor) -> str | None: ...

    async def clear_waiting_processor(self, scope: str, stream: str, processor: Processor) -> None: ...
