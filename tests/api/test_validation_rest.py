"""Issue 16's input defects over real HTTP: the same bounds as gRPC (one implementation in
app/domain), answered 400 with a JSON Error body naming the field, before anything is written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.rest import autoscale as autoscale_rest
from app.domain.limits import MAX_SEGMENTS_PER_EPOCH, MAX_TIMESTAMP_MS
from app.services.autoscale import AutoScaleIntake
from app.store.autoscale import PgAutoScaleStore
from app.testing.controller import Services, running_controller
from tests.api.conftest import rest_api, serve
from tests.api.conftest_rest import Api

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


@pytest.fixture
async def api(services: Services) -> AsyncIterator[Api]:
    async with rest_api(services) as connected:
        status, _ = await connected.call("POST", "/v1/scopes", json_body={"scopeName": "sc"})
        assert status == 201
        yield connected


def fixed(segments: int, **extra: Any) -> dict[str, Any]:
    return {"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": segments}, **extra}


async def create(api: Api, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await api.call("POST", "/v1/scopes/sc/streams", json_body={"streamName": name, **body})


async def stream_rows(services: Services) -> int:
    return int(await services.pool.fetchval("SELECT count(*) FROM streams"))


def refused(status: int, body: Any, *words: str) -> None:
    assert status == 400, body
    assert body["code"] == 400
    for word in words:
        assert word in body["message"], body["message"]


@pytest.mark.parametrize("segments", [MAX_SEGMENTS_PER_EPOCH + 1, 100_000, INT_MAX])
async def test_defect_9_rest_create_and_update_with_too_many_segments_are_400(
    api: Api, services: Services, segments: int
) -> None:
    refused(*await create(api, "big", fixed(segments)), "minNumSegments", str(MAX_SEGMENTS_PER_EPOCH))
    assert await stream_rows(services) == 0
    assert (await create(api, "s", fixed(1)))[0] == 201
    status, body = await api.call("PUT", "/v1/scopes/sc/streams/s", json_body=fixed(segments))
    refused(status, body, "minNumSegments")
    assert await services.pool.fetchval("SELECT count(*) FROM requests") == 0


async def test_defect_6_rest_retention_max_below_min_is_400(api: Api, services: Services) -> None:
    body = fixed(1, retentionPolicy={"type": "LIMITED_SIZE_MB", "value": 10, "maxValue": 5})
    refused(*await create(api, "r", body), "retentionMax")
    body = fixed(1, retentionPolicy={"type": "LIMITED_DAYS", "value": 3, "maxValue": 1})
    refused(*await create(api, "r", body), "retentionMax")
    assert await stream_rows(services) == 0


async def test_defect_6_rest_retention_time_beyond_the_bound_is_400(api: Api, services: Services) -> None:
    body = fixed(
        1, retentionPolicy={"type": "LIMITED_DAYS", "timeBasedRetention": {"minutes": LONG_MAX // 60_000}}
    )
    refused(*await create(api, "r", body), "retentionParam")
    assert await stream_rows(services) == 0


async def test_defect_6_rest_empty_tag_and_huge_scale_factor_are_400(api: Api, services: Services) -> None:
    refused(*await create(api, "t", fixed(1, streamTags=["a", ""])), "tag")
    by_rate = {
        "type": "BY_RATE_IN_EVENTS_PER_SEC",
        "targetRate": 10,
        "scaleFactor": INT_MAX,
        "minSegments": 1,
    }
    refused(*await create(api, "f", {"scalingPolicy": by_rate}), "scaleFactor")
    assert await stream_rows(services) == 0


async def test_defect_5_rest_nul_in_a_path_body_or_query_is_400(api: Api, services: Services) -> None:
    assert (await create(api, "s", fixed(1)))[0] == 201
    refused(*await api.call("GET", "/v1/scopes/s%00c"), "NUL")
    refused(*await api.call("GET", "/v1/scopes/sc/streams/s%00"), "NUL")
    refused(*await api.call("DELETE", "/v1/scopes/sc/streams/s%00"), "NUL")
    refused(*await api.call("POST", "/v1/scopes", json_body={"scopeName": "a\x00"}), "NUL")
    refused(*await create(api, "x\x00", fixed(1)), "NUL")
    refused(*await create(api, "x", fixed(1, streamTags=["t\x00"])), "NUL")
    refused(*await api.call("GET", "/v1/scopes/sc/streams", params={"tag": "t\x00"}), "NUL")
    assert await stream_rows(services) == 2  # s and its mark stream


async def test_defect_9_rest_the_internal_scope_cannot_be_deleted(api: Api, services: Services) -> None:
    await services.scopes.create_scope("_system")
    refused(*await api.call("DELETE", "/v1/scopes/_system"), "_system")
    assert await services.scopes.scope_exists("_system")


async def test_defect_1_rest_a_scale_report_past_the_timestamp_bound_is_400(db_url: str) -> None:
    """The report's time plus its validity marks a segment cold: Long.MAX_VALUE would overflow."""
    async with running_controller(db_url, workers=False) as services:
        store = PgAutoScaleStore(services.pool)
        intake = autoscale_rest.extension(AutoScaleIntake(store, services.clock))
        async with serve(services, store, rest_extensions=[intake]) as served:
            assert (await served.api.call("POST", "/v1/scopes", json_body={"scopeName": "sc"}))[0] == 201
            rate = {"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": 10, "scaleFactor": 2, "minSegments": 2}
            assert (await create(served.api, "s", {"scalingPolicy": rate}))[0] == 201
            for timestamp in (LONG_MAX, MAX_TIMESTAMP_MS + 1):
                report = {"segmentId": 1, "direction": "UP", "timestamp": timestamp, "numOfSplits": 2}
                status, body = await served.api.call(
                    "POST", "/v1/scopes/sc/streams/s/scale-reports", json_body=report
                )
                refused(status, body, "timestamp")
            assert await services.pool.fetchval("SELECT count(*) FROM requests") == 0
