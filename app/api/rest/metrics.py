"""The Prometheus scrape routes (`/prometheus`, Pravega's path, and `/metrics`, the usual one) and
the REST latency middleware. Both routes stay open like health: a scraper carries no credentials.

Invariant: the database-backed gauges are refreshed (async) before the registry is rendered, and a
failing refresh still answers the in-process metrics rather than a 500 that would blank a dashboard."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from app.metrics.registry import CONTENT_TYPE, Refresher, histogram, render

log = logging.getLogger(__name__)

PATHS = ("/prometheus", "/metrics")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REST = histogram("pgcontroller_rest_request_duration_seconds")


def metrics_routes(refreshers: Sequence[Refresher]) -> Callable[[web.Application], None]:
    """An extension for create_app: the scrape routes, refreshing `refreshers` first."""

    async def scrape(_: web.Request) -> web.Response:
        for refresh in refreshers:
            try:
                await refresh()
            except Exception:
                # The process's own counters are still worth answering: the gauges keep their
                # last values and the log says why they did not move.
                log.warning("a metrics refresh failed; answering the last values", exc_info=True)
        body = render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    def extend(app: web.Application) -> None:
        app.add_routes([web.get(path, scrape, allow_head=False) for path in PATHS])
        app.middlewares.insert(0, rest_latency)

    return extend


@web.middleware
async def rest_latency(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every call's duration, by method, route pattern (never the raw path: names are unbounded)
    and the status answered."""
    start = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        _REST.labels(request.method, route, str(status)).observe(time.perf_counter() - start)
