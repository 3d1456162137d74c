"""How Pravega's own tools call the REST API: its admin CLI asks `GET /v1/scopes/` (a trailing
slash), probes and proxies send HEAD, and Pravega answers `GET /ping`. The router below resolves a
path with trailing slashes as the path without them, and HEAD wherever GET is routed, so these
calls reach the same handler (and the same authorization rule) as the canonical GET."""

from __future__ import annotations

import warnings

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

PING_PATH = "/ping"


class PravegaToolsRouter(web.UrlDispatcher):
    """A router whose route table stays the canonical one (the OpenAPI document lists exactly
    it); only resolution is lenient, and only where the strict answer would be 404 or 405."""

    async def resolve(self, request: web.Request) -> UrlMappingMatchInfo:
        match = await super().resolve(request)
        path = request.rel_url.path
        if isinstance(match.http_exception, web.HTTPNotFound) and len(path) > 1 and path.endswith("/"):
            trimmed = path.rstrip("/") or "/"
            request = request.clone(rel_url=request.rel_url.with_path(trimmed).with_query(request.query))
            match = await super().resolve(request)
        failure = match.http_exception
        if (
            request.method == hdrs.METH_HEAD
            and isinstance(failure, web.HTTPMethodNotAllowed)
            and hdrs.METH_GET in failure.allowed_methods
        ):
            # aiohttp sends a HEAD answer's headers without its body, as HTTP requires.
            match = await super().resolve(request.clone(method=hdrs.METH_GET))
        return match


def new_application(middlewares: list[Middleware], client_max_size: int) -> web.Application:
    """An aiohttp application routed by `PravegaToolsRouter`. aiohttp marks its `router`
    argument deprecated, but it is the one public way to choose how paths resolve."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return web.Application(
            router=PravegaToolsRouter(), middlewares=middlewares, client_max_size=client_max_size
        )


async def ping(request: web.Request) -> web.Response:
    # Pravega's PingImpl: 200 and no body; it says only that the REST server answers.
    return web.Response(status=200)


ROUTES = [web.get(PING_PATH, ping, allow_head=False)]
