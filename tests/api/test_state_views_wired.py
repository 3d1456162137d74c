"""Customized state views as `serve` wires them: the process that leads the cluster aggregates
on its own (woken by the report's notification), and a long-polling reader sees the view change."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.main import rest_extensions
from app.services.health import HealthService
from app.testing.controller import running_controller
from tests.api.conftest_rest import Api

STATES = "/v1/cluster/customized-states"
VIEWS = "/v1/cluster/customized-views"
CONFIG = "/v1/cluster/customized-state-config"


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with running_controller(db_url) as services:
        for _ in range(100):
            if services.cluster_node.leader_term is not None:
                break
            await asyncio.sleep(0.05)
        assert services.cluster_node.leader_term is not None
        app = create_app(
            services.scopes,
            services.streams,
            HealthService(services.clock),
            services.lifecycle,
            services.transactions,
            rest_extensions(services.controller),
        )
        async with TestClient(TestServer(app)) as client:
            yield Api(client, app)


async def test_the_leader_aggregates_reports_and_a_long_poll_sees_each_change(api: Api) -> None:
    _, config = await api.call("GET", CONFIG)
    status, _ = await api.call(
        "PUT", CONFIG, json_body={"aggregatedStateNames": ["SERVING"], "version": config["version"]}
    )
    assert status == 200
    for host, state in (("h1:1", "LEADER"), ("h2:1", "FOLLOWER")):
        status, _ = await api.call(
            "PUT", f"{STATES}/{host}/SERVING/db", json_body={"partitions": {"p0": state, "p1": "OFFLINE"}}
        )
        assert status in (200, 201)

    async def view_after(version: int) -> dict[str, object]:
        status, body = await api.call("GET", f"{VIEWS}/SERVING/db?afterVersion={version}&timeoutMs=5000")
        assert status == 200, body
        return dict(body)

    view = await view_after(0)
    while view["partitions"] != {
        "p0": {"h1:1": "LEADER", "h2:1": "FOLLOWER"},
        "p1": {"h1:1": "OFFLINE", "h2:1": "OFFLINE"},
    }:
        view = await view_after(int(view["version"]))  # type: ignore[call-overload]

    waiting = asyncio.create_task(view_after(int(view["version"])))  # type: ignore[call-overload]
    await asyncio.sleep(0.1)
    status, _ = await api.call("DELETE", f"{STATES}/h1:1")
    assert status in (200, 204)
    changed = await asyncio.wait_for(waiting, 5)
    assert changed["partitions"] == {"p0": {"h2:1": "FOLLOWER"}, "p1": {"h2:1": "OFFLINE"}}
