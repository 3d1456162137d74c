"""The REST views of segment-store hosts and the container map (our extension) over the real
services: register (201 new, 200 again), list, deregister (204, 404), the map with its static
fallback, and 400 for bad input. Every answer is checked against the served OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.api.rest.cluster_hosts import extension
from app.clock import SystemClock
from app.ports import HostAddress
from app.services.containers import ContainerMapService
from app.services.health import HealthService
from app.store.containers import PgContainerMapStore
from app.testing.controller import Services, running_controller
from tests.api.conftest_rest import PREFIX, Api
from tests.api.test_rest import assert_error

HOSTS = "/v1/cluster/segment-stores"
CONTAINERS = "/v1/cluster/containers"
STATIC = (HostAddress("localhost", 12345),)


@pytest.fixture
async def cluster(db_url: str) -> AsyncIterator[tuple[Api, ContainerMapService]]:
    # No embedded store: it would register itself, and these tests own the hosts table.
    async with running_controller(db_url, workers=False, no_embedded_segment_store=True) as services:
        containers = ContainerMapService(PgContainerMapStore(services.pool), SystemClock(), 4, STATIC)
        app = build(services, containers)
        async with TestClient(TestServer(app)) as client:
            yield Api(client, app), containers


def build(services: Services, containers: ContainerMapService) -> Any:
    return create_app(
        services.scopes,
        services.streams,
        HealthService(SystemClock()),
        services.lifecycle,
        services.transactions,
        extensions=[extension(containers)],
    )


@pytest.fixture
def api(cluster: tuple[Api, ContainerMapService]) -> Api:
    return cluster[0]


async def test_register_is_201_then_200_with_the_same_record(api: Api) -> None:
    status, first = await api.call("POST", HOSTS, json_body={"host": "ss-1", "port": 12345})
    assert status == 201
    assert first["host"] == "ss-1" and first["port"] == 12345 and first["registeredAt"] > 0

    status, again = await api.call("POST", HOSTS, json_body={"host": "ss-1", "port": 12345})
    assert (status, again) == (200, first)


async def test_list_is_sorted_by_host_then_port(api: Api) -> None:
    assert await api.call("GET", HOSTS) == (200, {"segmentStores": []})
    for host, port in (("ss-2", 1), ("ss-1", 9), ("ss-1", 10)):
        status, _ = await api.call("POST", HOSTS, json_body={"host": host, "port": port})
        assert status == 201
    status, body = await api.call("GET", HOSTS)
    assert status == 200
    assert [(h["host"], h["port"]) for h in body["segmentStores"]] == [("ss-1", 9), ("ss-1", 10), ("ss-2", 1)]


async def test_deregister_is_204_then_404(api: Api) -> None:
    await api.call("POST", HOSTS, json_body={"host": "ss-1", "port": 12345})
    assert await api.call("DELETE", f"{HOSTS}/ss-1/12345") == (204, None)
    assert await api.call("GET", HOSTS) == (200, {"segmentStores": []})
    status, body = await api.call("DELETE", f"{HOSTS}/ss-1/12345")
    assert_error(status, body, 404)
    assert "ss-1:12345" in body["message"]


async def test_an_ipv6_host_round_trips(api: Api) -> None:
    status, _ = await api.call("POST", HOSTS, json_body={"host": "::1", "port": 12345})
    assert status == 201
    assert await api.call("DELETE", f"{HOSTS}/::1/12345") == (204, None)


@pytest.mark.parametrize(
    "body",
    [
        {"host": "", "port": 1},
        {"host": "a b", "port": 1},
        {"host": "a/b", "port": 1},
        {"port": 1},
        {"host": None, "port": 1},
        {"host": 5, "port": 1},
        {"host": "a"},
        {"host": "a", "port": 0},
        {"host": "a", "port": 65536},
        {"host": "a", "port": "80"},
        {"host": "a", "port": 1.5},
        {"host": "a", "port": True},
        [],
    ],
    ids=[
        "empty-host",
        "space",
        "slash",
        "no-host",
        "null-host",
        "number-host",
        "no-port",
        "port-0",
        "port-65536",
        "string-port",
        "float-port",
        "bool-port",
        "array",
    ],
)
async def test_bad_registrations_are_400_and_write_nothing(api: Api, body: Any) -> None:
    status, answer = await api.call("POST", HOSTS, json_body=body)
    assert_error(status, answer, 400)
    assert await api.call("GET", HOSTS) == (200, {"segmentStores": []})


async def test_a_body_that_is_not_json_is_400(api: Api) -> None:
    status, body = await api.call("POST", HOSTS, data=b"host=a", headers={"Content-Type": "application/json"})
    assert_error(status, body, 400)


@pytest.mark.parametrize(
    "port", ["abc", "0", "65536", "-1", "\u0661\u0662"], ids=["word", "0", "big", "neg", "arabic"]
)
async def test_deregister_with_a_bad_port_is_400(api: Api, port: str) -> None:
    status, body = await api.call("DELETE", f"{HOSTS}/ss-1/{port}")
    assert_error(status, body, 400)


async def test_the_container_map_falls_back_to_the_static_hosts(api: Api) -> None:
    status, body = await api.call("GET", CONTAINERS)
    assert status == 200
    assert body == {
        "containerCount": 4,
        "containers": [{"container": c, "host": "localhost", "port": 12345} for c in range(4)],
    }


async def test_the_container_map_shows_the_leaders_assignment(
    cluster: tuple[Api, ContainerMapService],
) -> None:
    api, containers = cluster
    for host in ("ss-b", "ss-a"):
        await api.call("POST", HOSTS, json_body={"host": host, "port": 1})
    # Registration alone moves nothing: the leader's rebalance does.
    assert (await api.call("GET", CONTAINERS))[1]["containers"][0]["host"] == "localhost"
    await containers.rebalance()
    status, body = await api.call("GET", CONTAINERS)
    assert status == 200
    assert [(c["container"], c["host"]) for c in body["containers"]] == [
        (0, "ss-a"),
        (1, "ss-b"),
        (2, "ss-a"),
        (3, "ss-b"),
    ]


async def test_other_methods_are_405(api: Api) -> None:
    status, body = await api.call("PUT", HOSTS, json_body={"host": "a", "port": 1})
    assert_error(status, body, 405)
    status, body = await api.call("POST", CONTAINERS, json_body={})
    assert_error(status, body, 405)


async def test_the_document_covers_exactly_this_extensions_routes(api: Api) -> None:
    routed = {
        (route.resource.canonical.removeprefix(PREFIX), route.method.lower())
        for route in api.app.router.routes()
        if route.resource is not None and route.resource.canonical.startswith(PREFIX + "/cluster/")
    }
    documented = {
        (path, method)
        for path, item in api.doc["paths"].items()
        if path.startswith("/cluster/segment-stores") or path == "/cluster/containers"
        for method in item
        if method != "parameters"
    }
    assert routed == documented
    assert routed == {
        ("/cluster/segment-stores", "get"),
        ("/cluster/segment-stores", "post"),
        ("/cluster/segment-stores/{host}/{port}", "delete"),
        ("/cluster/containers", "get"),
    }
