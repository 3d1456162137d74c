"""REST handlers for /v1/health and its readiness, liveness, details and status views, for the
process and for each contributor (`/v1/health/{id}`, `/v1/health/readiness/{id}`, ...), shaped as
Pravega's HealthImpl answers them: 200 with the verdict in the body. With `?strict=true` readiness
and liveness answer 503 when the verdict is false, for orchestrators' HTTP probes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.api.rest.http import error_response
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


def _health_body(health: HealthService) -> dict[str, Any]:
    contributors = sorted(health.contributors().items())
    return {
        "name": health.name,
        "status": health.status.value,
        "readiness": health.ready,
        "liveness": health.alive,
        "details": _details(health),
        "children": {name: _contributor(entry) for name, entry in contributors},
    }


def _verdict(request: web.Request, verdict: bool) -> web.Response:
    """The verdict in the body; `strict=true` asks for it as the HTTP status too (503 when false)."""
    strict = request.query.get("strict", "false").lower()
    if strict not in ("true", "false"):
        return error_response(400, "strict must be true or false")
    return web.json_response(verdict, status=503 if strict == "true" and not verdict else 200)


def _find(request: web.Request) -> ContributorHealth | None:
    return request.app[HEALTH].find(request.match_info["id"])


def _unknown(request: web.Request) -> web.Response:
    return error_response(404, f"no health contributor named {request.match_info['id']!r}")


async def get_health(request: web.Request) -> web.Response:
    return web.json_response(_health_body(request.app[HEALTH]))


async def get_readiness(request: web.Request) -> web.Response:
    return _verdict(request, request.app[HEALTH].ready)


async def get_liveness(request: web.Request) -> web.Response:
    return _verdict(request, request.app[HEALTH].alive)


async def get_details(request: web.Request) -> web.Response:
    return web.json_response(_details(request.app[HEALTH]))


async def get_status(request: web.Request) -> web.Response:
    return web.json_response(request.app[HEALTH].status.value)


async def get_contributor_health(request: web.Request) -> web.Response:
    entry = _find(request)
    return _unknown(request) if entry is None else web.json_response(_contributor(entry))


async def get_contributor_readiness(request: web.Request) -> web.Response:
    entry = _find(request)
    if entry is None:
        return _unknown(request)
    # A draining process is ready nowhere: no contributor invites new work once shutdown began.
    return _verdict(request, entry.status == HealthStatus.UP and not request.app[HEALTH].draining)


async def get_contributor_liveness(request: web.Request) -> web.Response:
    entry = _find(request)
    return _unknown(request) if entry is None else _verdict(request, entry.status in _ALIVE)


async def get_contributor_details(request: web.Request) -> web.Response:
    entry = _find(request)
    return _unknown(request) if entry is None else web.json_response(dict(entry.details))


async def get_contributor_status(request: web.Request) -> web.Response:
    entry = _find(request)
    return _unknown(request) if entry is None else web.json_response(entry.status.value)


# The fixed paths first: aiohttp matches in this order, and "readiness" must not be taken for an id.
ROUTES = [
    web.get("/v1/health", get_health, allow_head=False),
    web.get("/v1/health/readiness", get_readiness, allow_head=False),
    web.get("/v1/health/liveness", get_liveness, allow_head=False),
    web.get("/v1/health/details", get_details, allow_head=False),
    web.get("/v1/health/status", get_status, allow_head=False),
    web.get("/v1/health/readiness/{id}", get_contributor_readiness, allow_head=False),
    web.get("/v1/health/liveness/{id}", get_contributor_liveness, allow_head=False),
    web.get("/v1/health/details/{id}", get_contributor_details, allow_head=False),
    web.get("/v1/health/status/{id}", get_contributor_status, allow_head=False),
    web.get("/v1/health/{id}", get_contributor_health, allow_head=False),
]
