"""The operator's view of parked requests (requests that failed finally): list them, put one back
into its stream's queue, or drop it. A parked request never runs until an operator retries it."""

from __future__ import annotations

from app.domain.errors import InvalidInput, NotFound
from app.domain.requests import Request
from app.ports import RequestQueue

MAX_PAGE = 1000


class ParkedRequests:
    def __init__(self, requests: RequestQueue) -> None:
        self._requests = requests

    async def list_parked(self, after_id: int = 0, limit: int = 100) -> list[Request]:
        """Parked requests with an id above `after_id`, oldest first, at most `limit`."""
        if after_id < 0:
            raise InvalidInput(f"after must not be negative, got {after_id}")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be within 1-{MAX_PAGE}, got {limit}")
        return await self._requests.list_parked(after_id, limit)

    async def retry(self, request_id: int) -> None:
        """Back into its stream's queue, due now. Its workflow runs again from what the metadata
        holds: a request whose intent was rolled back when it was parked finishes at once."""
        if not await self._requests.unpark(request_id):
            raise NotFound(f"no parked request {request_id}")

    async def drop(self, request_id: int) -> None:
        if not await self._requests.drop_parked(request_id):
            raise NotFound(f"no parked request {request_id}")
