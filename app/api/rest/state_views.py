"""REST for customized state views (our extension, after Helix's CustomizedState API):
participants report their states per (state name, resource), operators read raw states, remove
a participant and choose the aggregated state names; anyone reads the views, and a listener
long-polls one view with `?afterVersion=N&timeoutMs=T` until its version passes N."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from app.api.rest.http import json_type_name, read_json_object
from app.api.rest.models import INT64_MAX, Fields
from app.domain.errors import InvalidInput
from app.domain.state_views import (
    CustomizedView,
    ParticipantSummary,
    ResourceStates,
    StateViewConfig,
    ViewSummary,
)
from app.services.state_views import MAX_WAIT_MS, StateViewService

STATE_VIEWS = web.AppKey("state_views", StateViewService)

STATES_PATH = "/v1/cluster/customized-states"
PARTICIPANT_PATH = STATES_PATH + "/{participant}"
RESOURCE_PATH = PARTICIPANT_PATH + "/{stateName}/{resource}"
VIEWS_PATH = "/v1/cluster/customized-views"
VIEW_PATH = VIEWS_PATH + "/{stateName}/{resource}"
CONFIG_PATH = "/v1/cluster/customized-state-config"

DEFAULT_WAIT_MS = 30_000
_DIGITS = re.compile(r"[0-9]{1,19}")


class _Versioned(Protocol):
    """A participant's states of one resource, or the view aggregated from them."""

    @property
    def state_name(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def updated_at(self) -> int: ...


def _versioned_json(states: _Versioned) -> dict[str, Any]:
    return {
        "stateName": states.state_name,
        "resource": states.resource,
        "version": states.version,
        "updatedAt": states.updated_at,
    }


def _resource_json(states: ResourceStates) -> dict[str, Any]:
    return {"participant": states.participant, **_versioned_json(states), "partitions": states.partitions}


def _participant_json(summary: ParticipantSummary) -> dict[str, Any]:
    return {
        "participant": summary.participant,
        "resources": summary.resources,
        "partitions": summary.partitions,
        "lastReportAt": summary.last_report_at,
    }


def _view_summary_json(view: ViewSummary) -> dict[str, Any]:
    return {**_versioned_json(view), "partitionCount": view.partition_count}


def _view_json(view: CustomizedView) -> dict[str, Any]:
    return {**_versioned_json(view), "partitions": view.partitions}


def _config_json(config: StateViewConfig) -> dict[str, Any]:
    return {
        "aggregatedStateNames": list(config.state_names),
        "version": config.version,
        "updatedAt": config.updated_at,
    }


def _partitions(body: dict[str, Any], *, merge: bool) -> dict[str, str | None]:
    raw = body.get("partitions")
    if not isinstance(raw, dict):
        raise InvalidInput(f"partitions must be an object, got {json_type_name(raw)}")
    partitions: dict[str, str | None] = {}
    for partition, state in raw.items():
        if state is None and merge:
            partitions[partition] = None
        elif isinstance(state, str):
            partitions[partition] = state
        else:
            expected = "a string or null" if merge else "a string"
            raise InvalidInput(
                f"partitions.{partition} must be {expected} (send structured states as JSON text), "
                f"got {json_type_name(state)}"
            )
    return partitions


def _query_int(request: web.Request, name: str, maximum: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw) or int(raw) > maximum:
        raise InvalidInput(f"{name} must be an integer within 0..{maximum}, got {raw!r}")
    return int(raw)


async def _report(request: web.Request, *, merge: bool) -> web.Response:
    body = await read_json_object(request)
    partitions = _partitions(body, merge=merge)
    expected = Fields(body).integer("version", minimum=0, maximum=INT64_MAX)
    info = request.match_info
    written = await request.app[STATE_VIEWS].report(
        info["participant"],
        info["stateName"],
        info["resource"],
        partitions,
        merge=merge,
        expected_version=expected,
    )
    if written.version is None:
        return web.Response(status=204)
    return web.json_response(
        {
            "participant": info["participant"],
            "stateName": info["stateName"],
            "resource": info["resource"],
            "version": written.version,
            "updatedAt": written.updated_at,
            "partitionCount": written.partition_count,
            "changedPartitions": written.changed,
        }
    )


async def replace_states(request: web.Request) -> web.Response:
    """PUT: the participant's whole partition map for (state name, resource)."""
    return await _report(request, merge=False)


async def merge_states(request: web.Request) -> web.Response:
    """PATCH: only the partitions given change; null removes one."""
    return await _report(request, merge=True)


async def get_resource_states(request: web.Request) -> web.Response:
    info = request.match_info
    states = await request.app[STATE_VIEWS].resource_states(
        info["participant"], info["stateName"], info["resource"]
    )
    return web.json_response(_resource_json(states))


async def get_participant_states(request: web.Request) -> web.Response:
    participant = request.match_info["participant"]
    found = await request.app[STATE_VIEWS].states(
        participant, request.query.get("stateName"), request.query.get("resource")
    )
    return web.json_response({"participant": participant, "states": [_resource_json(s) for s in found]})


async def remove_participant(request: web.Request) -> web.Response:
    await request.app[STATE_VIEWS].remove_participant(request.match_info["participant"])
    return web.Response(status=204)


async def list_participants(request: web.Request) -> web.Response:
    found = await request.app[STATE_VIEWS].participants()
    return web.json_response({"participants": [_participant_json(p) for p in found]})


async def list_views(request: web.Request) -> web.Response:
    found = await request.app[STATE_VIEWS].views(request.query.get("stateName"))
    return web.json_response({"views": [_view_summary_json(v) for v in found]})


async def get_view(request: web.Request) -> web.Response:
    """With `afterVersion`, waits up to `timeoutMs` for a version above it; then answers the
    view as it is (the caller compares versions)."""
    after = _query_int(request, "afterVersion", INT64_MAX)
    timeout = _query_int(request, "timeoutMs", MAX_WAIT_MS)
    info = request.match_info
    service = request.app[STATE_VIEWS]
    if after is None:
        view = await service.view(info["stateName"], info["resource"])
    else:
        wait_ms = DEFAULT_WAIT_MS if timeout is None else timeout
        view = await service.wait_view(info["stateName"], info["resource"], after, wait_ms)
    return web.json_response(_view_json(view))


async def get_config(request: web.Request) -> web.Response:
    return web.json_response(_config_json(await request.app[STATE_VIEWS].config()))


async def put_config(request: web.Request) -> web.Response:
    """The version read is required: a stale one is 409."""
    body = await read_json_object(request)
    fields = Fields(body)
    if body.get("aggregatedStateNames") is None:
        raise InvalidInput("aggregatedStateNames is required (an array of state names)")
    names = fields.strings("aggregatedStateNames")
    version = fields.required_integer("version", minimum=0, maximum=INT64_MAX)
    config = await request.app[STATE_VIEWS].set_config(names, version)
    return web.json_response(_config_json(config))


ROUTES = [
    web.get(STATES_PATH, list_participants, allow_head=False),
    web.get(PARTICIPANT_PATH, get_participant_states, allow_head=False),
    web.delete(PARTICIPANT_PATH, remove_participant),
    web.get(RESOURCE_PATH, get_resource_states, allow_head=False),
    web.put(RESOURCE_PATH, replace_states),
    web.patch(RESOURCE_PATH, merge_states),
    web.get(VIEWS_PATH, list_views, allow_head=False),
    web.get(VIEW_PATH, get_view, allow_head=False),
    web.get(CONFIG_PATH, get_config, allow_head=False),
    web.put(CONFIG_PATH, put_config),
]


def extension(service: StateViewService) -> Callable[[web.Application], None]:
    """For `create_app(..., extensions=[extension(service)])`."""

    def extend(app: web.Application) -> None:
        app[STATE_VIEWS] = service
        app.add_routes(ROUTES)

    return extend
