"""GET /v1/scopes/{scope}/streams/{stream}/watermarks (our extension) over the real services:
watermarks emitted by real rounds, newest first, the limit, and the errors; every answer is
checked against the served OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.api.rest.watermarks import extension
from app.clock import SystemClock
from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.health import HealthService
from app.services.watermarks import WatermarkService
from app.store.watermarks import PgWatermarkStore
from tests.api.conftest_rest import Api
from tests.api.test_rest import assert_error
from tests.support.services import Services, running_controller

PATH = "/v1/scopes/sc/streams/s/watermarks"
COUNT = 100


@dataclass
class Served:
    api: Api
    services: Services
    watermarks: WatermarkService


@pytest.fixture
async def w(db_url: str) -> AsyncIterator[Served]:
    async with running_controller(db_url, workers=False) as services:
        watermarks = WatermarkService(PgWatermarkStore(services.pool), services.clock)
        app = create_app(
            services.scopes,
            services.streams,
            HealthService(SystemClock()),
            services.lifecycle,
            services.transactions,
            extensions=[extension(watermarks)],
        )
        await services.scopes.create_scope("sc")
        await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(2)))
        async with TestClient(TestServer(app)) as client:
            yield Served(Api(client, app), services, watermarks)


async def emit(w: Served, time: int, position: dict[int, int]) -> None:
    """One writer reports, and one round runs for the stream under a seeded fence."""
    await w.watermarks.note_timestamp("sc", "s", "writer", position, time)
    bucket = stream_bucket("sc", "s", COUNT)
    await w.services.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) VALUES ('watermarks', $1, 'test', 1) "
        "ON CONFLICT (service, bucket) DO NOTHING",
        bucket,
    )
    summary = await w.watermarks.watermark_stream(
        "sc", "s", Fence(BucketService.WATERMARKS, bucket, 1), COUNT
    )
    assert summary.emitted == 1


async def listed(w: Served, **params: str) -> list[dict[str, Any]]:
    status, body = await w.api.call("GET", PATH, params=params)
    assert status == 200, body
    result: list[dict[str, Any]] = body["watermarks"]
    return result


async def test_watermarks_newest_first(w: Served) -> None:
    assert await listed(w) == []
    await emit(w, 10, {0: 5, 1: 6})
    await emit(w, 20, {0: 7})
    await emit(w, 30, {1: 9})
    body = await listed(w)
    assert [(x["sequence"], x["lowerTimeBound"], x["upperTimeBound"]) for x in body] == [
        (3, 30, 30),
        (2, 20, 20),
        (1, 10, 10),
    ]
    assert body[0]["streamCut"] == [
        {"segmentId": 0, "offset": 7, "keyStart": 0.0, "keyEnd": 0.5},
        {"segmentId": 1, "offset": 9, "keyStart": 0.5, "keyEnd": 1.0},
    ]
    assert all(isinstance(x["createdAt"], int) and x["createdAt"] > 0 for x in body)
    assert [x["sequence"] for x in await listed(w, limit="2")] == [3, 2]
    assert [x["sequence"] for x in await listed(w, limit="1000")] == [3, 2, 1]


async def test_missing_stream_is_404(w: Served) -> None:
    status, body = await w.api.call("GET", "/v1/scopes/sc/streams/nosuch/watermarks")
    assert_error(status, body, 404)
    status, body = await w.api.call("GET", "/v1/scopes/nosuch/streams/s/watermarks")
    assert_error(status, body, 404)


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "", "1.5", "99999999999"])
async def test_bad_limit_is_400(w: Served, limit: str) -> None:
    status, body = await w.api.call("GET", PATH, params={"limit": limit})
    assert_error(status, body, 400)
    assert "limit" in body["message"]


async def test_only_get_is_allowed(w: Served) -> None:
    status, body = await w.api.call("POST", PATH, json_body={})
    assert_error(status, body, 405)
