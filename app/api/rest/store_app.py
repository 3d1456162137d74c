"""The HTTP application of a segment store run as its own process (`pgcontroller segment-store`):
its metrics (`/prometheus`, `/metrics`, GET and HEAD) and the `/v1/health` probes, nothing else.

Invariant: every route is open, as serve's health and scrape routes are (a scraper or an
orchestrator's probe carries no credentials), and none reads the database: a scrape answers the
process's own counters even while PostgreSQL is unreachable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from app.api.rest import health as health_routes
from app.api.rest.http import error_response
from app.api.rest.keys import HEALTH
from app.api.rest.metrics import PATHS
from app.metrics.registry import CONTENT_TYPE, render
from app.services.health import HealthService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own 404 and 405 are plain text; every failure here is the JSON `Error` shape."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = exc.headers.get(hdrs.ALLOW)
        headers = {"Allow": allow} if allow else None
        return error_response(exc.status, f"{request.method} {request.path}: {exc.reason}", headers)


async def scrape(_: web.Request) -> web.Response:
    # No refreshers: the database-backed gauges are the controller's; a store has only its
    # traffic counters, which are always current.
    return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE})


def store_app(health: HealthService) -> web.Application:
    app = web.Application(middlewares=[json_errors])
    app[HEALTH] = health
    # allow_head: a HEAD answers the GET's headers without the body (a cheap reachability check).
    app.add_routes([web.get(path, scrape) for path in PATHS])
    app.add_routes(health_routes.ROUTES)
    return app
