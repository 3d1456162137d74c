"""REST handlers for /v1/scopes: list, create, get and (non-recursive) delete, answering with
the status codes of Pravega's StreamMetadataResourceImpl. An outcome that is a domain error
(exists, not found, invalid name, not empty) is raised as one, so the error table decides its
status. `_system`, Pravega's internal scope, is always listed and found; no user change reaches
it (app/api/rest/streams.py, app/services/scopes.py)."""

from __future__ import annotations

from aiohttp import web

from app.api.rest.http import collect_names, read_json_object
from app.api.rest.keys import SCOPES
from app.api.rest.models import scope_name_from_json
from app.api.rest.paging import CONTINUATION_TOKEN, PageRequest, page_request, with_continuation
from app.domain.errors import AlreadyExists, InvalidInput, NotEmpty, NotFound
from app.domain.names import INTERNAL_SCOPE, NUL
from app.services.paging import encode_token
from app.services.scopes import ScopeOutcome

# The token of a first page that held only `_system` (limit 1): the store's listing from its start.
# It decodes to NUL, which no scope name holds, so it cannot stand for a real position.
_AFTER_INTERNAL_SCOPE = encode_token(NUL)


def _listed(names: list[str]) -> list[dict[str, str]]:
    return [{"scopeName": name} for name in names]


async def list_scopes(request: web.Request) -> web.Response:
    """Every scope with Pravega's `_system` first, as Pravega lists it (its controller creates
    that scope at start; the operator's readiness probe for older versions looks for it here)."""
    service = request.app[SCOPES]
    asked = page_request(request)
    if asked is None:
        names = await collect_names(lambda token: service.list_scopes(token))
        return web.json_response({"scopes": _listed(_with_internal_scope(names))})
    if asked.token == _AFTER_INTERNAL_SCOPE:
        asked = PageRequest("", asked.limit)
    elif not asked.token:
        if asked.limit == 1:
            return web.json_response(
                {"scopes": _listed([INTERNAL_SCOPE]), CONTINUATION_TOKEN: _AFTER_INTERNAL_SCOPE}
            )
        # The first page holds `_system` and one scope fewer from the store.
        store_page = await service.list_scopes("", asked.limit - 1)
        body = {"scopes": _listed(_with_internal_scope(store_page.names))}
        return web.json_response(with_continuation(body, store_page, PageRequest("", asked.limit - 1)))
    page = await service.list_scopes(asked.token, asked.limit)
    body = {"scopes": _listed([name for name in page.names if name != INTERNAL_SCOPE])}
    return web.json_response(with_continuation(body, page, asked))


def _with_internal_scope(names: list[str]) -> list[str]:
    # A `_system` row may exist (gRPC accepts the name, as Pravega's controller does): listed once.
    return [INTERNAL_SCOPE, *(name for name in names if name != INTERNAL_SCOPE)]


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
    if name != INTERNAL_SCOPE and not await request.app[SCOPES].scope_exists(name):
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
