"""REST views of the segment-store hosts and the container map (our extension; Pravega keeps
both in ZooKeeper): register, list and deregister hosts, and show which host owns each
container. Registration only records membership; the leader moves containers after its
rebalance delay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.api.rest.http import read_json_object
from app.api.rest.models import Fields
from app.domain.errors import InvalidInput
from app.ports import RegisteredHost
from app.services.containers import MAX_PORT, ContainerMapService

CONTAINER_MAP = web.AppKey("container_map", ContainerMapService)

SEGMENT_STORES_PATH = "/v1/cluster/segment-stores"
CONTAINERS_PATH = "/v1/cluster/containers"


def _host_json(registered: RegisteredHost) -> dict[str, Any]:
    return {
        "host": registered.address.host,
        "port": registered.address.port,
        "registeredAt": registered.registered_at,
    }


async def register_segment_store(request: web.Request) -> web.Response:
    """201 for a new host, 200 when it was registered already (registration is idempotent)."""
    fields = Fields(await read_json_object(request))
    host = fields.required_string("host")
    port = fields.required_integer("port", minimum=1, maximum=MAX_PORT)
    registered, created = await request.app[CONTAINER_MAP].register_host(host, port)
    return web.json_response(_host_json(registered), status=201 if created else 200)


async def list_segment_stores(request: web.Request) -> web.Response:
    hosts = await request.app[CONTAINER_MAP].hosts()
    return web.json_response({"segmentStores": [_host_json(h) for h in hosts]})


async def deregister_segment_store(request: web.Request) -> web.Response:
    text = request.match_info["port"]
    # str.isdigit accepts other scripts' digits, which int() would then read; ports are ASCII.
    if not (text.isascii() and text.isdigit()):
        raise InvalidInput(f"port must be an integer, got {text!r}")
    await request.app[CONTAINER_MAP].deregister_host(request.match_info["host"], int(text))
    return web.Response(status=204)


async def get_containers(request: web.Request) -> web.Response:
    assignment = await request.app[CONTAINER_MAP].assignment()
    return web.json_response(
        {
            "containerCount": assignment.container_count,
            "containers": [
                {"container": container, "host": owner.host, "port": owner.port}
                for container, owner in sorted(assignment.owners.items())
            ],
        }
    )


ROUTES = [
    web.post(SEGMENT_STORES_PATH, register_segment_store),
    web.get(SEGMENT_STORES_PATH, list_segment_stores, allow_head=False),
    web.delete(SEGMENT_STORES_PATH + "/{host}/{port}", deregister_segment_store),
    web.get(CONTAINERS_PATH, get_containers, allow_head=False),
]


def extension(service: ContainerMapService) -> Callable[[web.Application], None]:
    """For `create_app(..., extensions=[extension(service)])`."""

    def extend(app: web.Application) -> None:
        app[CONTAINER_MAP] = service
        app.add_routes(ROUTES)

    return extend
