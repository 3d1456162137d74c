"""REST handlers for /v1/health and its readiness, liveness, details and status views, shaped
as Pravega's HealthImpl answers them (always 200; the verdict is in the body)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.api.rest.keys import HEALTH
from app.services.health import ContributorHealth, HealthService, HealthStatus

# Pravega's Status.isAlive: anything at or above NEW.
_ALIVE = frozenset({HealthStatus.UP, HealthStatus.STARTING, HealthStatus.NEW})


def _contributor(entry: ContributorHealth) -> dict[str, Any]:
    return {
        "name": entry.name,
        "status": entry.status.value,
        "readiness": entry.status == HealthStatus.UP,
        "liveness": entry.status in _ALIVE,
        "details": dict(entry.details),
        "children": {},
    }


def _details(health: HealthService) -> dict[str, str]:
    # The process itself has no details of its own; each contributor's status is the useful summary.
    return {name: entry.status.value for name, entry in sorted(health.contributors().items())}


async def get_health(request: web.Request) -> web.Response:
    health = request.app[HEALTH]
    contributors = sorted(health.contributors().items())
    return web.json_response(
        {
            "name": health.name,
            "status": health.status.value,
            "readiness": health.ready,
            "liveness": health.alive,
            "details": _details(health),
            "children": {name: _contributor(entry) for name, entry in contributors},
        }
    )


async def get_readiness(request: web.Request) -> web.Response:
    return web.json_response(request.app[HEALTH].ready)


async def get_liveness(request: web.Request) -> web.Response:
    return web.json_response(request.app[HEALTH].alive)


async def get_details(request: web.Request) -> web.Response:
    return web.json_response(_details(request.app[HEALTH]))


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(request.app[HEALTH].status.value)


ROUTES = [
    web.get("/v1/health", get_health, allow_head=False),
    web.get("/v1/health/readiness", get_readiness, allow_head=False),
    web.get("/v1/health/liveness", get_liveness, allow_head=False),
    web.get("/v1/health/details", get_details, allow_head=False),
    web.get("/v1/health/status", get_status, allow_head=False),
]
