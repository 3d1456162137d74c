"""GET /v1/scopes/{scope}/streams/{stream}/watermarks (our extension) over the real services:
watermarks emitted by real rounds, newest first, the limit, and the errors; every answer is
checked against the served OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.rest.watermarks import extension
from app.domain.cluster import BucketService, Fence, stream_bucket
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.watermarks import WatermarkService
from app.store.watermarks import PgWatermarkStore
from app.testing.controller import running_controller
from tests.api.conftest import Served, serve
from tests.api.test_rest import assert_error

PATH = "/v1/scopes/sc/streams/s/watermarks"
COUNT = 100


@pytest.fixture
async def w(db_url: str) -> AsyncIterator[Served[WatermarkService]]:
    async with running_controller(db_url, workers=False) as services:
        watermarks = WatermarkService(PgWatermarkStore(services.pool), services.clock)
        await services.scopes.create_scope("sc")
        await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(2)))
        async with serve(services, watermarks, rest_extensions=[extension(watermarks)]) as served:
            yield served


async def emit(w: Served[WatermarkService], time: int, position: dict[int, int]) -> None:
    """One writer reports, and one round runs for the stream under a seeded fence."""
    await w.subject.note_timestamp("sc", "s", "writer", position, time)
    bucket = stream_bucket("sc", "s", COUNT)
    await w.services.pool.execute(
        "INSERT INTO bucket_owners (service, bucket, owner, generation) VALUES ('watermarks', $1, 'test', 1) "
        "ON CONFLICT (service, bucket) DO NOTHING",
        bucket,
    )
    summary = await w.subject.watermark_stream("sc", "s", Fence(BucketService.WATERMARKS, bucket, 1), COUNT)
    assert summary.emitted == 1


async def listed(w: Served[WatermarkService], **params: str) -> list[dict[str, Any]]:
    status, body = await w.api.call("GET", PATH, params=params)
    assert status == 200, body
    result: list[dict[str, Any]] = body["watermarks"]
    return result


async def test_watermarks_newest_first(w: Served[WatermarkService]) -> None:
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


async def test_missing_stream_is_404(w: Served[WatermarkService]) -> None:
    status, body = await w.api.call("GET", "/v1/scopes/sc/streams/nosuch/watermarks")
    assert_error(status, body, 404)
    status, body = await w.api.call("GET", "/v1/scopes/nosuch/streams/s/watermarks")
    assert_error(status, body, 404)


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "", "1.5", "99999999999"])
async def test_bad_limit_is_400(w: Served[WatermarkService], limit: str) -> None:
    status, body = await w.api.call("GET", PATH, params={"limit": limit})
    assert_error(status, body, 400)
    assert "limit" in body["message"]


async def test_only_get_is_allowed(w: Served[WatermarkService]) -> None:
    status, body = await w.api.call("POST", PATH, json_body={})
    assert_error(status, body, 405)
