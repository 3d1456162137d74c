"""REST handlers for streams in a scope: list (with Pravega's filter_type/filter_value
filters), create and get, each answering with a StreamProperty body."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from app.api.rest.http import collect_names, error_response, read_json_object
from app.api.rest.keys import STREAMS
from app.api.rest.models import stream_config_from_json, stream_name_from_json, stream_property
from app.domain.errors import NotFound
from app.domain.names import is_internal_stream
from app.services.streams import CreateStreamOutcome, StreamService

SHOW_INTERNAL_STREAMS = "showInternalStreams"
TAG = "tag"


async def list_streams(request: web.Request) -> web.Response:
    scope = request.match_info["scopeName"]
    service = request.app[STREAMS]
    filter_type = request.query.get("filter_type")
    tag = request.query.get("filter_value")
    # As in Pravega: an unknown filter_type, or `tag` without a value, lists user streams.
    if filter_type == TAG and tag is not None:
        names = await collect_names(lambda token: service.list_streams_for_tag(scope, tag, token))
    else:
        internal_only = filter_type == SHOW_INTERNAL_STREAMS
        every = await collect_names(lambda token: service.list_streams(scope, token))
        names = [name for name in every if is_internal_stream(name) == internal_only]
    return web.json_response({"streams": await _properties(service, scope, names)})


async def _properties(service: StreamService, scope: str, names: list[str]) -> list[dict[str, Any]]:
    properties = []
    for name in names:
        try:
            config = await service.get_config(scope, name)
        except NotFound:
            continue  # deleted since it was listed
        properties.append(stream_property(scope, name, config))
    return properties


async def create_stream(request: web.Request) -> web.Response:
    scope = request.match_info["scopeName"]
    body = await read_json_object(request)
    # The name is checked before the configuration, as Pravega does.
    name = stream_name_from_json(body)
    config = stream_config_from_json(body)
    outcome = await request.app[STREAMS].create_stream(scope, name, config)
    if outcome == CreateStreamOutcome.SUCCESS:
        return web.json_response(stream_property(scope, name, config), status=201)
    if outcome == CreateStreamOutcome.EXISTS:
        return error_response(409, f"stream {scope}/{name} already exists")
    if outcome == CreateStreamOutcome.SCOPE_NOT_FOUND:
        return error_response(404, f"scope {scope!r} not found")
    if outcome == CreateStreamOutcome.INVALID_NAME:
        return error_response(400, f"invalid stream name {name!r}")
    raise RuntimeError(f"create_stream answered {outcome}")


async def get_stream(request: web.Request) -> web.Response:
    scope = request.match_info["scopeName"]
    name = request.match_info["streamName"]
    config = await request.app[STREAMS].get_config(scope, name)
    return web.json_response(stream_property(scope, name, config))


ROUTES = [
    web.get("/v1/scopes/{scopeName}/streams", list_streams, allow_head=False),
    web.post("/v1/scopes/{scopeName}/streams", create_stream),
    web.get("/v1/scopes/{scopeName}/streams/{streamName}", get_stream, allow_head=False),
]
