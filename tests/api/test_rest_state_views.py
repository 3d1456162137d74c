"""The REST API of customized state views (our extension) over the real services: reports (PUT
replaces, PATCH merges, null removes), raw states, participant removal, views, the listener's
long poll (answers on a change, and on timeout), the aggregation config with its version, and
4xx answers with the JSON error body. Every answer is checked against the served OpenAPI
document. Aggregation passes run on demand (`run_once`) as the leader of term 1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.api.rest.state_views import extension
from app.clock import SystemClock
from app.domain.state_views import MAX_STATE_LENGTH
from app.services.state_views import StateViewService, ViewAggregation
from app.store.state_views import PgStateViewStore
from app.testing.controller import running_controller
from tests.api.conftest import rest_api
from tests.api.conftest_rest import PREFIX, Api
from tests.api.test_rest import assert_error
from workers.state_views import StateViewAggregator

STATES = "/v1/cluster/customized-states"
VIEWS = "/v1/cluster/customized-views"
CONFIG = "/v1/cluster/customized-state-config"
H1, H2 = "10.0.0.1:12345", "10.0.0.2:12345"
S, R = "SERVING", "db"


@dataclass
class Cluster:
    api: Api
    service: StateViewService
    aggregator: StateViewAggregator

    async def aggregate(self, names: list[str]) -> None:
        _, config = await self.api.call("GET", CONFIG)
        status, _ = await self.api.call(
            "PUT", CONFIG, json_body={"aggregatedStateNames": names, "version": config["version"]}
        )
        assert status == 200
        await self.aggregator.run_once()


@pytest.fixture
async def cluster(db_url: str) -> AsyncIterator[Cluster]:
    async with running_controller(db_url, workers=False) as services:
        await services.pool.execute(
            "INSERT INTO cluster_leader (id, controller_id, term, since) VALUES (1, 'test', 1, 0)"
        )
        store = PgStateViewStore(services.pool)
        service = StateViewService(store, SystemClock(), poll_s=0.05)
        aggregator = StateViewAggregator(ViewAggregation(store, SystemClock()), lambda: True, lambda: 1)
        async with rest_api(services, [extension(service)]) as served_api:
            yield Cluster(served_api, service, aggregator)


@pytest.fixture
def api(cluster: Cluster) -> Api:
    return cluster.api


def resource(participant: str = H1, state_name: str = S, name: str = R) -> str:
    return f"{STATES}/{participant}/{state_name}/{name}"


# --- reports and raw states ---------------------------------------------------------------------


async def test_put_replaces_patch_merges_and_null_removes(api: Api) -> None:
    status, body = await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON", "p1": "OFF"}})
    assert status == 200
    assert body["version"] == 0 and body["partitionCount"] == 2 and body["changedPartitions"] == 2
    assert (body["participant"], body["stateName"], body["resource"]) == (H1, S, R)

    status, body = await api.call(
        "PATCH", resource(), json_body={"partitions": {"p1": None, "p2": '{"a": 1}'}}
    )
    assert status == 200 and (body["version"], body["partitionCount"], body["changedPartitions"]) == (1, 2, 2)
    status, record = await api.call("GET", resource())
    assert status == 200
    assert record["partitions"] == {"p0": "ON", "p2": '{"a": 1}'} and record["version"] == 1

    status, body = await api.call("PUT", resource(), json_body={"partitions": {"p9": "ON"}})
    assert status == 200 and body["partitionCount"] == 1
    assert (await api.call("GET", resource()))[1]["partitions"] == {"p9": "ON"}

    # Nothing left: the record goes.
    assert await api.call("PATCH", resource(), json_body={"partitions": {"p9": None}}) == (204, None)
    status, body = await api.call("GET", resource())
    assert_error(status, body, 404)


async def test_a_report_at_a_version_is_conditional(api: Api) -> None:
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON"}})
    status, body = await api.call("PUT", resource(), json_body={"partitions": {"p0": "OFF"}, "version": 0})
    assert status == 200 and body["version"] == 1
    status, body = await api.call("PATCH", resource(), json_body={"partitions": {"p0": "X"}, "version": 0})
    assert_error(status, body, 409)
    status, body = await api.call("PUT", resource(H2), json_body={"partitions": {"p0": "X"}, "version": 0})
    assert_error(status, body, 409)
    assert (await api.call("GET", resource()))[1]["partitions"] == {"p0": "OFF"}


async def test_raw_states_per_participant_with_filters_and_the_participant_list(api: Api) -> None:
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON"}})
    await api.call("PUT", resource(name="kv"), json_body={"partitions": {"q": "1", "r": "2"}})
    await api.call("PUT", resource(state_name="OTHER"), json_body={"partitions": {"x": "y"}})
    await api.call("PUT", resource(H2), json_body={"partitions": {"p0": "OFF"}})

    status, body = await api.call("GET", f"{STATES}/{H1}")
    assert status == 200 and body["participant"] == H1
    assert [(s["stateName"], s["resource"]) for s in body["states"]] == [("OTHER", R), (S, R), (S, "kv")]
    status, body = await api.call("GET", f"{STATES}/{H1}", params={"stateName": S})
    assert [s["resource"] for s in body["states"]] == [R, "kv"]
    status, body = await api.call("GET", f"{STATES}/{H1}", params={"stateName": S, "resource": "kv"})
    assert [s["partitions"] for s in body["states"]] == [{"q": "1", "r": "2"}]
    assert await api.call("GET", f"{STATES}/nobody") == (200, {"participant": "nobody", "states": []})

    status, body = await api.call("GET", STATES)
    assert status == 200
    assert [(p["participant"], p["resources"], p["partitions"]) for p in body["participants"]] == [
        (H1, 3, 4),
        (H2, 1, 1),
    ]


async def test_removing_a_participant_is_204_then_404(cluster: Cluster, api: Api) -> None:
    await cluster.aggregate([S])
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON"}})
    await api.call("PUT", resource(H2), json_body={"partitions": {"p0": "OFF"}})
    await cluster.aggregator.run_once()
    assert (await api.call("GET", f"{VIEWS}/{S}/{R}"))[1]["partitions"] == {"p0": {H1: "ON", H2: "OFF"}}

    assert await api.call("DELETE", f"{STATES}/{H2}") == (204, None)
    status, body = await api.call("DELETE", f"{STATES}/{H2}")
    assert_error(status, body, 404)
    await cluster.aggregator.run_once()
    assert (await api.call("GET", f"{VIEWS}/{S}/{R}"))[1]["partitions"] == {"p0": {H1: "ON"}}


# --- the config ---------------------------------------------------------------------------------


async def test_the_config_moves_at_the_version_read_and_409s_when_stale(api: Api) -> None:
    status, config = await api.call("GET", CONFIG)
    assert status == 200 and config == {"aggregatedStateNames": [], "version": 0, "updatedAt": 0}

    status, config = await api.call(
        "PUT", CONFIG, json_body={"aggregatedStateNames": ["B", "A", "B"], "version": 0}
    )
    assert status == 200 and config["aggregatedStateNames"] == ["A", "B"] and config["version"] == 1
    assert (await api.call("GET", CONFIG))[1] == config

    status, body = await api.call("PUT", CONFIG, json_body={"aggregatedStateNames": [], "version": 0})
    assert_error(status, body, 409)
    assert (await api.call("GET", CONFIG))[1]["aggregatedStateNames"] == ["A", "B"]


@pytest.mark.parametrize(
    "body",
    [
        {"version": 0},
        {"aggregatedStateNames": None, "version": 0},
        {"aggregatedStateNames": "A", "version": 0},
        {"aggregatedStateNames": ["A", 5], "version": 0},
        {"aggregatedStateNames": [""], "version": 0},
        {"aggregatedStateNames": ["a/b"], "version": 0},
        {"aggregatedStateNames": ["A"]},
        {"aggregatedStateNames": ["A"], "version": "0"},
        {"aggregatedStateNames": ["A"], "version": -1},
        [],
    ],
    ids=[
        "no-names",
        "null-names",
        "string-names",
        "number-name",
        "empty-name",
        "slash",
        "no-version",
        "string-version",
        "negative-version",
        "array",
    ],
)
async def test_bad_configs_are_400_and_change_nothing(api: Api, body: Any) -> None:
    status, answer = await api.call("PUT", CONFIG, json_body=body)
    assert_error(status, answer, 400)
    assert (await api.call("GET", CONFIG))[1]["version"] == 0


# --- views and the long poll --------------------------------------------------------------------


async def test_views_are_listed_and_read(cluster: Cluster, api: Api) -> None:
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON", "p1": "ON"}})
    await api.call("PUT", resource(H2), json_body={"partitions": {"p0": "OFF"}})
    await api.call("PUT", resource(state_name="OTHER"), json_body={"partitions": {"p0": "x"}})
    await cluster.aggregate([S])

    status, body = await api.call("GET", VIEWS)
    assert status == 200
    [summary] = body["views"]
    assert (summary["stateName"], summary["resource"], summary["partitionCount"]) == (S, R, 2)
    status, view = await api.call("GET", f"{VIEWS}/{S}/{R}")
    assert status == 200 and view["version"] == summary["version"]
    assert view["partitions"] == {"p0": {H1: "ON", H2: "OFF"}, "p1": {H1: "ON"}}
    assert await api.call("GET", VIEWS, params={"stateName": "OTHER"}) == (200, {"views": []})
    status, body = await api.call("GET", f"{VIEWS}/OTHER/{R}")
    assert_error(status, body, 404)


async def test_a_long_poll_answers_when_the_view_moves(cluster: Cluster, api: Api) -> None:
    await cluster.aggregate([S])
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON"}})
    await cluster.aggregator.run_once()
    version = (await api.call("GET", f"{VIEWS}/{S}/{R}"))[1]["version"]

    poll = asyncio.create_task(
        api.call("GET", f"{VIEWS}/{S}/{R}", params={"afterVersion": str(version), "timeoutMs": "20000"})
    )
    await asyncio.sleep(0.2)
    assert not poll.done()
    loop = asyncio.get_running_loop()
    began = loop.time()
    await api.call("PATCH", resource(), json_body={"partitions": {"p0": "OFF"}})
    await cluster.aggregator.run_once()
    status, view = await asyncio.wait_for(poll, 5)
    assert status == 200 and view["version"] > version
    assert view["partitions"] == {"p0": {H1: "OFF"}}
    assert loop.time() - began < 2

    # Already above: at once.
    status, same = await api.call("GET", f"{VIEWS}/{S}/{R}", params={"afterVersion": str(version)})
    assert status == 200 and same == view


async def test_a_long_poll_times_out_with_the_view_as_it_is(cluster: Cluster, api: Api) -> None:
    await cluster.aggregate([S])
    await api.call("PUT", resource(), json_body={"partitions": {"p0": "ON"}})
    await cluster.aggregator.run_once()
    _, view = await api.call("GET", f"{VIEWS}/{S}/{R}")
    loop = asyncio.get_running_loop()
    began = loop.time()
    status, same = await api.call(
        "GET", f"{VIEWS}/{S}/{R}", params={"afterVersion": str(view["version"]), "timeoutMs": "300"}
    )
    assert status == 200 and same == view
    assert loop.time() - began >= 0.3

    status, body = await api.call(
        "GET", f"{VIEWS}/{S}/nothing", params={"afterVersion": "0", "timeoutMs": "100"}
    )
    assert_error(status, body, 404)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (resource("a%20b"), {"partitions": {"p": "s"}}),
        (resource(state_name="a!"), {"partitions": {"p": "s"}}),
        (resource(name="x" * 129), {"partitions": {"p": "s"}}),
        (resource(), {"partitions": {"p": "x" * (MAX_STATE_LENGTH + 1)}}),
        (resource(), {"partitions": {"p": ""}}),
        (resource(), {"partitions": {"bad partition": "s"}}),
        (resource(), {"partitions": {"p": 5}}),
        (resource(), {"partitions": {"p": {"structured": True}}}),
        (resource(), {"partitions": {"p": None}}),
        (resource(), {"partitions": ["p"]}),
        (resource(), {"partitions": "p"}),
        (resource(), {}),
        (resource(), []),
        (resource(), {"partitions": {"p": "s"}, "version": "1"}),
        (resource(), {"partitions": {"p": "s"}, "version": -1}),
    ],
    ids=[
        "participant-space",
        "state-name",
        "long-resource",
        "long-state",
        "empty-state",
        "partition-space",
        "number-state",
        "object-state",
        "null-in-put",
        "array-partitions",
        "string-partitions",
        "no-partitions",
        "array-body",
        "string-version",
        "negative-version",
    ],
)
async def test_bad_reports_are_400_and_write_nothing(api: Api, path: str, body: Any) -> None:
    status, answer = await api.call("PUT", path, json_body=body)
    assert_error(status, answer, 400)
    assert (await api.call("GET", STATES))[1] == {"participants": []}


async def test_a_merge_refuses_non_string_states_too(api: Api) -> None:
    status, body = await api.call("PATCH", resource(), json_body={"partitions": {"p": 1}})
    assert_error(status, body, 400)
    assert "string or null" in body["message"]


async def test_a_body_that_is_not_json_is_400_and_another_media_type_415(api: Api) -> None:
    status, body = await api.call("PUT", resource(), data=b"{", headers={"Content-Type": "application/json"})
    assert_error(status, body, 400)
    status, body = await api.call("PUT", resource(), data=b"x", headers={"Content-Type": "text/plain"})
    assert_error(status, body, 415)


@pytest.mark.parametrize(
    ("path", "params"),
    [
        (f"{VIEWS}/{S}/{R}", {"afterVersion": "-1"}),
        (f"{VIEWS}/{S}/{R}", {"afterVersion": "x"}),
        (f"{VIEWS}/{S}/{R}", {"afterVersion": "1", "timeoutMs": "60001"}),
        (f"{VIEWS}/{S}/{R}", {"afterVersion": "1", "timeoutMs": "1.5"}),
        (f"{VIEWS}/a!/{R}", {}),
        (VIEWS, {"stateName": "a b"}),
        (f"{STATES}/{H1}", {"resource": ""}),
        (f"{STATES}/{H1}", {"stateName": "x" * 129}),
    ],
    ids=[
        "negative",
        "word",
        "long-timeout",
        "float-timeout",
        "view-name",
        "list-filter",
        "empty-filter",
        "long-filter",
    ],
)
async def test_bad_reads_are_400(api: Api, path: str, params: dict[str, str]) -> None:
    status, body = await api.call("GET", path, params=params)
    assert_error(status, body, 400)


async def test_other_methods_are_405(api: Api) -> None:
    for method, path in (
        ("POST", resource()),
        ("PUT", VIEWS),
        ("DELETE", CONFIG),
        ("PATCH", f"{STATES}/{H1}"),
    ):
        status, body = await api.call(method, path, json_body={})
        assert_error(status, body, 405)


async def test_the_document_covers_exactly_this_extensions_routes(api: Api) -> None:
    ours = ("/cluster/customized-states", "/cluster/customized-views", "/cluster/customized-state-config")
    routed = {
        (route.resource.canonical.removeprefix(PREFIX), route.method.lower())
        for route in api.app.router.routes()
        if route.resource is not None and route.resource.canonical.removeprefix(PREFIX).startswith(ours)
    }
    documented = {
        (path, method)
        for path, item in api.doc["paths"].items()
        if path.startswith(ours)
        for method in item
        if method != "parameters"
    }
    assert routed == documented
    assert len(routed) == 10
