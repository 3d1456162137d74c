"""The durable request queue in PostgreSQL (RequestQueue port) and the fairness barrier.

A request row is deleted only after its workflow completed (at-least-once); postponing or
starting one is a version-checked update, so two consumers can never both advance a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from app.domain.cluster import Fence
from app.domain.errors import WriteConflict
from app.domain.records import Versioned
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.observability.context import current_request_id
from app.store import queries
from app.store.db import Connection, Database, Row

_SQL = queries.load("requests")


async def insert_request(conn: Connection, request: NewRequest) -> int:
    """Inserts on the caller's connection, so the row commits with the caller's transaction."""
    request_id = await conn.fetchval(
        _SQL["insert_request"],
        request.processor.value,
        request.kind.value,
        request.scope,
        request.stream,
        dict(request.payload),
        request.created_at,
        # Whatever call is enqueueing (gRPC, REST, or a workflow running an earlier request).
        current_request_id(),
    )
    return int(request_id)


def _request_from_row(row: Row) -> Request:
    return Request(
        id=row["id"],
        kind=RequestKind(row["kind"]),
        scope=row["scope"],
        stream=row["stream"],
        bucket=row["bucket"],
        payload=row["payload"],
        created_at=row["created_at"],
        not_before=row["not_before"],
        attempts=row["attempts"],
        started=row["started"],
        last_error=row["last_error"],
        version=row["version"],
        processor=Processor(row["processor"]),
        parked_at=row["parked_at"],
        failures=row["failures"],
        trace_id=row.get("trace_id"),
    )


class PgRequestQueue:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def enqueue(self, request: NewRequest) -> int:
        """For requests with no metadata step of their own (the request is the intent)."""
        async with self._db.acquire() as conn:
            return await insert_request(conn, request)

    async def pending(
        self,
        processor: Processor,
        buckets: Sequence[int],
        exclude: Sequence[int],
        limit: int,
        *,
        first_per_key: bool = False,
    ) -> list[Request]:
        sql = _SQL["pending_first_per_key"] if first_per_key else _SQL["pending_requests"]
        rows = await self._db.fetch(sql, processor.value, list(buckets), list(exclude), limit)
        return [_request_from_row(row) for row in rows]

    async def get(self, request_id: int) -> Request | None:
        row = await self._db.fetchrow(_SQL["get_request"], request_id)
        return None if row is None else _request_from_row(row)

    async def list_requests(self, after_id: int, limit: int) -> list[Request]:
        rows = await self._db.fetch(_SQL["list_requests"], after_id, limit)
        return [_request_from_row(row) for row in rows]

    async def postpone(
        self, request: Request, not_before: int, error: str | None, *, failed: bool = False
    ) -> Request:
        version = await self._db.fetchval(
            _SQL["postpone_request"], request.id, not_before, error, request.version, failed
        )
        if version is None:
            raise WriteConflict(f"request {request.id} was changed or completed concurrently")
        return replace(
            request,
            not_before=not_before,
            attempts=request.attempts + 1,
            failures=request.failures + (1 if failed else 0),
            last_error=error,
            version=version,
        )

    # --- parked requests ------------------------------------------------------------------------

    async def park(self, request_id: int, error: str, parked_at: int, fence: Fence | None = None) -> bool:
        """Parks the request with its error; False when nothing was parked (parked already, gone,
        or, with a fence, the bucket has a newer owner, who runs the request again)."""
        if fence is None:
            version = await self._db.fetchval(_SQL["park_request"], request_id, error, parked_at)
        else:
            version = await self._db.fetchval(
                _SQL["park_request_fenced"],
                request_id,
                fence.service.value,
                fence.bucket,
                fence.generation,
                error,
                parked_at,
            )
        return version is not None

    async def list_parked(self, after_id: int, limit: int) -> list[Request]:
        rows = await self._db.fetch(_SQL["list_parked"], after_id, limit)
        return [_request_from_row(row) for row in rows]

    async def parked_since(self, scope: str, stream: str, kind: RequestKind, since_ms: int) -> Request | None:
        row = await self._db.fetchrow(_SQL["parked_since"], scope, stream, kind.value, since_ms)
        return None if row is None else _request_from_row(row)

    async def unpark(self, request_id: int) -> bool:
        return await self._db.fetchval(_SQL["unpark_request"], request_id) is not None

    async def drop_parked(self, request_id: int) -> bool:
        return await self._db.fetchval(_SQL["drop_parked"], request_id) is not None

    async def mark_started(self, request: Request) -> Request:
        if request.started:
            return request
        version = await self._db.fetchval(_SQL["start_request"], request.id, request.version)
        if version is None:
            raise WriteConflict(f"request {request.id} was changed or completed concurrently")
        return replace(request, started=True, version=version)

    async def ack(self, request_id: int, fence: Fence | None = None) -> None:
        """Idempotent: acknowledging a request twice is harmless."""
        if fence is None:
            await self._db.execute(_SQL["ack_request"], request_id)
        else:
            await self._db.execute(
                _SQL["ack_request_fenced"],
                request_id,
                fence.service.value,
                fence.bucket,
                fence.generation,
            )

    async def pending_ids_for_key(self, processor: Processor, scope: str, stream: str) -> list[int]:
        rows = await self._db.fetch(_SQL["pending_ids_for_key"], processor.value, scope, stream)
        return [row["id"] for row in rows]

    async def ack_many(self, request_ids: Sequence[int], fence: Fence | None = None) -> None:
        if fence is None:
            await self._db.execute(_SQL["ack_many"], list(request_ids))
        else:
            await self._db.execute(
                _SQL["ack_many_fenced"],
                list(request_ids),
                fence.service.value,
                fence.bucket,
                fence.generation,
            )

    async def has_pending(self, scope: str, stream: str, kind: RequestKind) -> bool:
        return bool(await self._db.fetchval(_SQL["pending_for_key"], scope, stream, kind.value))

    # --- the fairness barrier ----------------------------------------------------------------

    async def get_waiting_processor(self, scope: str, stream: str) -> Versioned[str] | None:
        row = await self._db.fetchrow(_SQL["get_waiting_processor"], scope, stream)
        return None if row is None else Versioned(row["processor"], row["version"])

    async def set_waiting_processor(self, scope: str, stream: str, processor: Processor) -> str | None:
        """Records `processor` as the stream's waiting processor unless another one is;
        returns the processor recorded afterwards (None when the stream is gone)."""
        inserted = await self._db.fetchval(_SQL["insert_waiting_processor"], scope, stream, processor.value)
        if inserted is not None:
            return processor.value
        current = await self._db.fetchrow(_SQL["get_waiting_processor"], scope, stream)
        return None if current is None else str(current["processor"])

    async def clear_waiting_processor(self, scope: str, stream: str, processor: Processor) -> None:
        """Clears the barrier if `processor` holds it; a barrier of another processor stays."""
        current = await self.get_waiting_processor(scope, stream)
        if current is None or current.value != processor.value:
            return
        await self._db.fetchval(
            _SQL["delete_waiting_processor"], scope, stream, processor.value, current.version
        )
