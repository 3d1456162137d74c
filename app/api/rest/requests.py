"""REST views of parked requests (our extension): requests whose workflow failed finally, with
their errors; an operator lists them, retries one (back into its stream's queue) or drops it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.domain.errors import InvalidInput
from app.domain.requests import Request
from app.services.parked import MAX_PAGE, ParkedRequests

PARKED = web.AppKey("parked_requests", ParkedRequests)

PARKED_PATH = "/v1/requests/parked"
_DEFAULT_LIMIT = 100
# Request ids are bigint.
_MAX_ID = 2**63 - 1


def request_json(row: Request) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind.value,
        "processor": row.processor.value,
        "scope": row.scope,
        "stream": row.stream,
        "createdAt": row.created_at,
        "parkedAt": row.parked_at,
        "attempts": row.attempts,
        "error": row.last_error or "",
    }


def _integer(text: str, what: str, low: int, high: int) -> int:
    # str.isdigit accepts other scripts' digits, which int() would then read; ids are ASCII.
    if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise InvalidInput(f"{what} must be an integer within {low}-{high}, got {text[:40]!r}")
    return int(text)


async def list_parked(request: web.Request) -> web.Response:
    after = _integer(request.query.get("after", "0"), "after", 0, _MAX_ID)
    limit = _integer(request.query.get("limit", str(_DEFAULT_LIMIT)), "limit", 1, MAX_PAGE)
    rows = await request.app[PARKED].list_parked(after, limit)
    return web.json_response({"requests": [request_json(row) for row in rows]})


async def retry_parked(request: web.Request) -> web.Response:
    request_id = _integer(request.match_info["id"], "request id", 1, _MAX_ID)
    await request.app[PARKED].retry(request_id)
    return web.json_response({"id": request_id, "status": "QUEUED"}, status=202)


async def drop_parked(request: web.Request) -> web.Response:
    request_id = _integer(request.match_info["id"], "request id", 1, _MAX_ID)
    await request.app[PARKED].drop(request_id)
    return web.Response(status=204)


ROUTES = [
    web.get(PARKED_PATH, list_parked, allow_head=False),
    web.post(PARKED_PATH + "/{id}/retry", retry_parked),
    web.delete(PARKED_PATH + "/{id}", drop_parked),
]


def extension(service: ParkedRequests) -> Callable[[web.Application], None]:
    """For `create_app(..., extensions=[extension(service)])`."""

    def extend(app: web.Application) -> None:
        app[PARKED] = service
        app.add_routes(ROUTES)

    return extend
