"""REST handlers for /v1/scopes: list, create, get and (non-recursive) delete, answering with
the status codes of Pravega's StreamMetadataResourceImpl. An outcome that is a domain error
(exists, not found, invalid name, not empty) is raised as one, so the error table decides its
status."""

from __future__ import annotations

from aiohttp import web

from app.api.rest.http import collect_names, read_json_object
from app.api.rest.keys import SCOPES
from app.api.rest.models import scope_name_from_json
from app.api.rest.paging import page_request, with_continuation
from app.domain.errors import AlreadyExists, InvalidInput, NotEmpty, NotFound
from app.services.scopes import ScopeOutcome


async def list_scopes(request: web.Request) -> web.Response:
    service = request.app[SCOPES]
    asked = page_request(request)
    if asked is None:
        names = await collect_names(lambda token: service.list_scopes(token))
        return web.json_response({"scopes": [{"scopeName": name} for name in names]})
    page = await service.list_scopes(asked.token, asked.limit)
    body = {"scopes": [{"scopeName": name} for name in page.names]}
    return web.json_response(with_continuation(body, page, asked))


async def create_scope(request: web.Request) -> web.Response:
    name = scope_name_from_json(await read_json_object(request))
    outcome = await request.app[SCOPES].create_scope(name)
    if outcome == ScopeOutcome.SUCCESS:
        return web.json_response({"scopeName": name}, status=201)
    if outcome == ScopeOutcome.EXISTS:
        raise AlreadyExists(f"scope {name!r} already exists")
    if outcome == ScopeOutcome.INVALID_NAME:
        raise InvalidInput(f"invalid scope name {name!r}")
    raise RuntimeError(f"create_scope answered {outcome}")


async def get_scope(request: web.Request) -> web.Response:
    name = request.match_info["scopeName"]
    if not await request.app[SCOPES].scope_exists(name):
        raise NotFound(f"scope {name!r} not found")
    return web.json_response({"scopeName": name})


async def delete_scope(request: web.Request) -> web.Response:
    name = request.match_info["scopeName"]
    outcome = await request.app[SCOPES].delete_scope(name)
    if outcome == ScopeOutcome.SUCCESS:
        return web.Response(status=204)
    if outcome == ScopeOutcome.NOT_FOUND:
        raise NotFound(f"scope {name!r} not found")
    if outcome == ScopeOutcome.NOT_EMPTY:
        raise NotEmpty(f"scope {name!r} still holds streams; delete them first")
    raise RuntimeError(f"delete_scope answered {outcome}")


ROUTES = [
    web.get("/v1/scopes", list_scopes, allow_head=False),
    web.post("/v1/scopes", create_scope),
    web.get("/v1/scopes/{scopeName}", get_scope, allow_head=False),
    web.delete("/v1/scopes/{scopeName}", delete_scope),
]
