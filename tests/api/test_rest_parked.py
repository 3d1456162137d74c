"""Parked requests over REST (our extension), with the request workers running: a truncation the
segment store refuses is listed with its error, retried (parked again, since it fails the same
way) and dropped; bad ids and bounds are 400, unknown ids 404. Every answer is checked against
the served OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import NewRequest, RequestKind
from app.services.stream_updates import UpdateOutcome
from app.testing.controller import Services, running_controller
from app.wiring.controller import rest_extensions
from tests.api.conftest import rest_api
from tests.api.conftest_rest import Api

PARKED = "/v1/requests/parked"


@pytest.fixture
async def api(services: Services) -> AsyncIterator[Api]:
    async with rest_api(services, rest_extensions(services.controller)) as connected:
        yield connected


async def park_a_truncation(services: Services) -> None:
    await services.scopes.create_scope("sc")
    await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    outcome = await services.lifecycle.truncation.truncate_stream("sc", "s", {0: 100})
    assert outcome is UpdateOutcome.FAILURE


async def listed(api: Api, **params: str) -> list[dict[str, object]]:
    status, body = await api.call("GET", PARKED, params=params)
    assert status == 200, body
    requests: list[dict[str, object]] = body["requests"]
    return requests


async def test_a_parked_request_is_listed_retried_and_dropped(api: Api, services: Services) -> None:
    assert await listed(api) == []
    await park_a_truncation(services)
    [row] = await listed(api)
    assert (row["kind"], row["scope"], row["stream"], row["processor"]) == (
        "truncate_stream",
        "sc",
        "s",
        "requests",
    )
    assert isinstance(row["error"], str) and row["error"].startswith("InvalidInput: cannot truncate")
    request_id = row["id"]

    # Retried: it runs again. Its truncation was rolled back when it was parked, so this run has
    # nothing left to do and is acknowledged: the request is gone.
    assert await api.call("POST", f"{PARKED}/{request_id}/retry") == (
        202,
        {"id": request_id, "status": "QUEUED"},
    )
    for _ in range(200):
        if await services.pool.fetchval("SELECT count(*) FROM requests") == 0:
            break
        await asyncio.sleep(0.02)
    assert await services.pool.fetchval("SELECT count(*) FROM requests") == 0
    assert await listed(api) == []
    assert (await services.stream_store.get_state("sc", "s")).value == StreamState.ACTIVE

    # Parked again, then dropped for good.
    assert await services.lifecycle.truncation.truncate_stream("sc", "s", {0: 100}) is UpdateOutcome.FAILURE
    [again] = await listed(api)
    assert again["id"] != request_id
    assert await api.call("DELETE", f"{PARKED}/{again['id']}") == (204, None)
    assert await listed(api) == []
    status, body = await api.call("DELETE", f"{PARKED}/{again['id']}")
    assert (status, body["code"]) == (404, 404)
    assert "no parked request" in body["message"]


@pytest.fixture
async def idle_api(db_url: str) -> AsyncIterator[tuple[Api, Services]]:
    """No request workers: rows parked by hand stay as they are."""
    async with (
        running_controller(db_url, workers=False) as services,
        rest_api(services, rest_extensions(services.controller)) as connected,
    ):
        yield connected, services


async def test_parked_requests_page_in_id_order(idle_api: tuple[Api, Services]) -> None:
    api, services = idle_api
    ids = []
    for n in range(3):
        request_id = await services.requests.enqueue(
            NewRequest(RequestKind.SEAL_STREAM, "nosuch", f"s{n}", 1)
        )
        # Parked directly: what matters here is the listing.
        assert await services.requests.park(request_id, f"E{n}", 10 + n)
        ids.append(request_id)
    assert [r["id"] for r in await listed(api, limit="2")] == ids[:2]
    assert [r["id"] for r in await listed(api, after=str(ids[1]))] == ids[2:]
    assert [r["error"] for r in await listed(api)] == ["E0", "E1", "E2"]


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", PARKED, {"limit": "0"}),
        ("GET", PARKED, {"limit": "1001"}),
        ("GET", PARKED, {"after": "-1"}),
        ("GET", PARKED, {"after": "x"}),
        ("GET", PARKED, {"limit": "\u0661"}),  # an Arabic-Indic one: a digit, but not ASCII
        ("POST", f"{PARKED}/abc/retry", {}),
        ("POST", f"{PARKED}/0/retry", {}),
        ("DELETE", f"{PARKED}/99999999999999999999", {}),
    ],
)
async def test_bad_ids_and_bounds_are_400(api: Api, method: str, path: str, params: dict[str, str]) -> None:
    status, body = await api.call(method, path, params=params)
    assert status == 400, body
    assert "must be an integer" in body["message"]


async def test_unknown_ids_are_404(api: Api) -> None:
    for method, path in (("POST", f"{PARKED}/12345/retry"), ("DELETE", f"{PARKED}/12345")):
        status, body = await api.call(method, path)
        assert status == 404 and body["message"] == "no parked request 12345"
