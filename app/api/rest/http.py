"""HTTP plumbing shared by the REST handlers: JSON error bodies, reading a JSON request
body strictly, and draining a paged service listing."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from aiohttp import hdrs, web

from app.domain.errors import InvalidInput
from app.domain.names import require_text
from app.services.paging import Page


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    """Every failure answers with this one shape, documented as `Error` in openapi.json."""
    return web.json_response({"code": status, "message": message}, status=status, headers=headers)


def _reject_constant(token: str) -> NoReturn:
    # Python's json accepts NaN and Infinity; JSON does not, and neither do we.
    raise ValueError(f"{token} is not valid JSON")


def _is_json_media_type(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object. A declared non-JSON media type is 415, as Jersey answers for
    Pravega's `consumes: application/json`; a missing Content-Type is tolerated (curl -d)."""
    if hdrs.CONTENT_TYPE in request.headers and not _is_json_media_type(request.content_type):
        raise web.HTTPUnsupportedMediaType(
            text=f"request body must be application/json, got {request.content_type}"
        )
    raw = await request.read()
    if not raw.strip():
        raise InvalidInput("request body must be a JSON object, got an empty body")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidInput(f"request body must be a JSON object, got {json_type_name(body)}")
    _check_json_text(body, "body")
    return body


def _check_json_text(value: Any, where: str) -> None:
    """No string in the body, key or value, carries NUL (PostgreSQL text cannot hold it).
    Depth is bounded by json.loads' recursion limit, already passed."""
    if isinstance(value, str):
        require_text(where, value)
    elif isinstance(value, dict):
        for key, member in value.items():
            require_text(f"{where} member name", key)
            _check_json_text(member, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_text(item, f"{where}[{i}]")


@web.middleware
async def text_inputs(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Path segments and query values are checked for NUL before any handler runs, so no route
    can pass one on to the store."""
    for name, value in request.match_info.items():
        require_text(f"path parameter {name!r}", value)
    for name, value in request.query.items():
        require_text(f"query parameter {name!r}", name)
        require_text(f"query parameter {name!r}", value)
    return await handler(request)


def json_type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


async def collect_names(fetch: Callable[[str], Awaitable[Page]]) -> list[str]:
    """Every name of a paged listing; Pravega's REST listings are not paged."""
    names: list[str] = []
    token = ""
    while True:
        page = await fetch(token)
        names.extend(page.names)
        # An unchanged token would loop forever; the paging contract forbids it, we still stop.
        if not page.names or page.token == token:
            return names
        token = page.token
