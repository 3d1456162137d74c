"""REST handlers for streams in a scope: list (with Pravega's filter_type/filter_value filters),
create, get, update, seal, delete and scaling events, with the status codes Pravega's resource
answers for each outcome. An outcome that is a domain error (exists, not found, invalid name) is
raised as one, so the error table decides its status; the others are Pravega's own answers."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from app.api.rest.http import collect_names, error_response, read_json_object
from app.api.rest.keys import LIFECYCLE, STREAMS
from app.api.rest.models import (
    scale_metadata,
    scaling_window_from_query,
    stream_config_from_json,
    stream_name_from_json,
    stream_property,
    stream_state_from_json,
)
from app.api.rest.paging import page_request, with_continuation
from app.domain.errors import AlreadyExists, InvalidInput, NotFound
from app.domain.names import INTERNAL_SCOPE, is_internal_stream
from app.services.deletion import DeleteStreamOutcome
from app.services.paging import PAGE_LIMIT, Page
from app.services.stream_updates import UpdateOutcome
from app.services.streams import CreateStreamOutcome, StreamService

log = logging.getLogger(__name__)

SHOW_INTERNAL_STREAMS = "showInternalStreams"
TAG = "tag"


async def list_streams(request: web.Request) -> web.Response:
    try:
        return await _list_streams(request)
    except NotFound:
        # `_system` is always listed (app/api/rest/scopes.py): without a row it holds no streams.
        if request.match_info["scopeName"] != INTERNAL_SCOPE:
            raise
        return web.json_response({"streams": []})


async def _list_streams(request: web.Request) -> web.Response:
    scope = request.match_info["scopeName"]
    service = request.app[STREAMS]
    filter_type = request.query.get("filter_type")
    tag = request.query.get("filter_value")
    # As in Pravega: an unknown filter_type, or `tag` without a value, lists user streams.
    by_tag = filter_type == TAG and tag is not None
    internal_only = filter_type == SHOW_INTERNAL_STREAMS

    def fetch(token: str, limit: int = PAGE_LIMIT) -> Awaitable[Page]:
        if by_tag:
            assert tag is not None
            return service.list_streams_for_tag(scope, tag, token, limit)
        return service.list_streams(scope, token, limit)

    def shown(names: list[str]) -> list[str]:
        # As in Pravega: without the tag filter, internal and user streams are listed apart.
        return names if by_tag else [name for name in names if is_internal_stream(name) == internal_only]

    asked = page_request(request)
    if asked is None:
        names = await collect_names(fetch)
        return web.json_response({"streams": await _properties(service, scope, shown(names))})
    # A page counts the names before the internal/user filter, so a page may hold fewer
    # streams than `limit` (even none) while a token says more may follow.
    page = await fetch(asked.token, asked.limit)
    body = {"streams": await _properties(service, scope, shown(page.names))}
    return web.json_response(with_continuation(body, page, asked))


async def _properties(service: StreamService, scope: str, names: list[str]) -> list[dict[str, Any]]:
    """Each stream's property, its configuration read a page at a time (one query per page, not
    one per stream); a stream deleted since it was listed is left out."""
    properties: list[dict[str, Any]] = []
    for start in range(0, len(names), PAGE_LIMIT):
        chunk = names[start : start + PAGE_LIMIT]
        configs = await service.get_configs(scope, chunk)
        properties.extend(stream_property(scope, name, configs[name]) for name in chunk if name in configs)
    return properties


async def create_stream(request: web.Request) -> web.Response:
    scope = request.match_info["scopeName"]
    _refuse_internal_scope(scope, "create")
    body = await read_json_object(request)
    # The name is checked before the configuration, as Pravega does.
    name = stream_name_from_json(body)
    config = stream_config_from_json(body)
    outcome = await request.app[STREAMS].create_stream(scope, name, config)
    if outcome == CreateStreamOutcome.SUCCESS:
        return web.json_response(stream_property(scope, name, config), status=201)
    if outcome == CreateStreamOutcome.EXISTS:
        raise AlreadyExists(f"stream {scope}/{name} already exists")
    if outcome == CreateStreamOutcome.SCOPE_NOT_FOUND:
        raise NotFound(f"scope {scope!r} not found")
    if outcome == CreateStreamOutcome.INVALID_NAME:
        raise InvalidInput(f"invalid stream name {name!r}")
    raise RuntimeError(f"create_stream answered {outcome}")


def _stream_path(request: web.Request) -> tuple[str, str]:
    return request.match_info["scopeName"], request.match_info["streamName"]


def _refuse_internal_scope(scope: str, action: str) -> None:
    """`_system` holds the controller's own streams; Pravega's REST resource refuses the names
    they use (validateUserStreamName), and no user change reaches them here either."""
    if scope == INTERNAL_SCOPE:
        raise InvalidInput(
            f"scope {INTERNAL_SCOPE} is the controller's internal scope: cannot {action} its streams"
        )


def _failed(message: str) -> web.Response:
    # Pravega's resource answers a bare 500 for these outcomes; ours says which one it was.
    log.warning("%s", message)
    return error_response(500, message)


async def get_stream(request: web.Request) -> web.Response:
    scope, name = _stream_path(request)
    config = await request.app[STREAMS].get_config(scope, name)
    return web.json_response(stream_property(scope, name, config))


def _not_updated(outcome: UpdateOutcome, scope: str, name: str, action: str) -> web.Response:
    if outcome == UpdateOutcome.STREAM_NOT_FOUND:
        raise NotFound(f"stream {scope}/{name} not found")
    if outcome == UpdateOutcome.STREAM_SEALED:
        return _failed(f"{action} of stream {scope}/{name} failed: the stream is sealed")
    return _failed(f"{action} of stream {scope}/{name} failed: the stream is busy (another update?); retry")


async def update_stream(request: web.Request) -> web.Response:
    scope, name = _stream_path(request)
    _refuse_internal_scope(scope, "update")
    config = stream_config_from_json(await read_json_object(request))
    outcome = await request.app[LIFECYCLE].updates.update_stream(scope, name, config)
    if outcome == UpdateOutcome.SUCCESS:
        return web.json_response(stream_property(scope, name, config))
    return _not_updated(outcome, scope, name, "update")


async def update_stream_state(request: web.Request) -> web.Response:
    scope, name = _stream_path(request)
    _refuse_internal_scope(scope, "seal")
    state = stream_state_from_json(await read_json_object(request))
    outcome = await request.app[LIFECYCLE].sealing.seal_stream(scope, name)
    if outcome == UpdateOutcome.SUCCESS:
        return web.json_response({"streamState": state})
    return _not_updated(outcome, scope, name, "sealing")


async def delete_stream(request: web.Request) -> web.Response:
    scope, name = _stream_path(request)
    _refuse_internal_scope(scope, "delete")
    outcome = await request.app[LIFECYCLE].deletion.delete_stream(scope, name)
    if outcome == DeleteStreamOutcome.SUCCESS:
        return web.Response(status=204)
    if outcome == DeleteStreamOutcome.STREAM_NOT_FOUND:
        raise NotFound(f"stream {scope}/{name} not found")
    if outcome == DeleteStreamOutcome.STREAM_NOT_SEALED:
        # Pravega's named precondition for this outcome; no domain error stands for it.
        return error_response(412, f"stream {scope}/{name} is not sealed; seal it before deleting it")
    return _failed(f"deletion of stream {scope}/{name} failed")


async def get_scaling_events(request: web.Request) -> web.Response:
    scope, name = _stream_path(request)
    from_ms, to_ms = scaling_window_from_query(request.query)
    events = await request.app[LIFECYCLE].history.scaling_events(scope, name, from_ms, to_ms)
    return web.json_response(scale_metadata(events))


STREAM_PATH = "/v1/scopes/{scopeName}/streams/{streamName}"

ROUTES = [
    web.get("/v1/scopes/{scopeName}/streams", list_streams, allow_head=False),
    web.post("/v1/scopes/{scopeName}/streams", create_stream),
    web.get(STREAM_PATH, get_stream, allow_head=False),
    web.put(STREAM_PATH, update_stream),
    web.delete(STREAM_PATH, delete_stream),
    web.put(STREAM_PATH + "/state", update_stream_state),
    web.get(STREAM_PATH + "/scaling-events", get_scaling_events, allow_head=False),
]
