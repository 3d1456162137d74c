"""REST size limits: bodies over MAX_REST_BODY_BYTES are 413 with the JSON error body (through the
production servers), and the listings that grow without bound can be paged with `limit` and
`continuationToken` while their default stays Pravega's whole listing. Every answer is checked
against openapi.json."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from app.domain.limits import MAX_REST_BODY_BYTES
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.paging import PAGE_LIMIT
from app.testing.controller import Services
from tests.api.conftest import rest_api
from tests.api.conftest_rest import Api
from tests.api.limits_servers import production_servers

STREAMS = 25


@pytest.fixture
async def api(services: Services) -> AsyncIterator[Api]:
    async with rest_api(services) as running:
        yield running


async def _rest_post(port: int, body: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{port}/v1/scopes",
            data=io.BytesIO(body),
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        return response.status, json.loads(await response.read())


def _padded(document: dict[str, Any], size: int) -> bytes:
    raw = json.dumps(document).encode()
    return raw + b" " * (size - len(raw))


async def test_defect_9_rest_body_over_the_limit_is_413_json(services: Services) -> None:
    async with production_servers(services) as servers:
        status, body = await _rest_post(
            servers.rest_port, _padded({"scopeName": "big"}, MAX_REST_BODY_BYTES + 1)
        )
        assert status == 413 and body["code"] == 413, body
        assert str(MAX_REST_BODY_BYTES) in body["message"]
        # Exactly at the limit is read and served.
        status, body = await _rest_post(
            servers.rest_port, _padded({"scopeName": "fits"}, MAX_REST_BODY_BYTES)
        )
        assert status == 201, body
    assert await services.scopes.scope_exists("fits")
    assert not await services.scopes.scope_exists("big")


async def _walk(api: Api, path: str, key: str, limit: int, **params: str) -> list[list[Any]]:
    """Every page of a paged listing, following continuationToken until an answer has none."""
    pages: list[list[Any]] = []
    query = {"limit": str(limit), **params}
    while True:
        status, body = await api.call("GET", path, params=query)
        assert status == 200, body
        assert len(body[key]) <= limit
        pages.append(body[key])
        if "continuationToken" not in body:
            return pages
        assert len(pages) <= 100, "the paging does not end"
        query = {"limit": str(limit), "continuationToken": body["continuationToken"], **params}


async def _create_streams(services: Services) -> list[str]:
    await services.scopes.create_scope("sc")
    names = [f"s{i:02d}" for i in range(STREAMS)]
    for name in names:
        await services.streams.create_stream("sc", name, StreamConfig(ScalingPolicy.fixed(1)))
    return names


async def test_defect_9_rest_stream_listing_pages_with_limit_and_continuation_token(
    api: Api, services: Services
) -> None:
    names = await _create_streams(services)
    pages = await _walk(api, "/v1/scopes/sc/streams", "streams", 7)
    listed = [item["streamName"] for page in pages for item in page]
    assert listed == names
    # Each stream has its mark stream, so 50 names: 8 pages of 7 names before the filter.
    assert len(pages) == 8
    internal = await _walk(api, "/v1/scopes/sc/streams", "streams", 10, filter_type="showInternalStreams")
    assert [item["streamName"] for page in internal for item in page] == [f"_MARK{n}" for n in names]
    # The default answer is still Pravega's: the whole listing, no token.
    status, body = await api.call("GET", "/v1/scopes/sc/streams")
    assert status == 200 and "continuationToken" not in body
    assert [item["streamName"] for item in body["streams"]] == names


async def test_defect_9_rest_stream_listing_by_tag_pages(api: Api, services: Services) -> None:
    await services.scopes.create_scope("sc")
    tagged = [f"t{i:02d}" for i in range(5)]
    for name in tagged:
        await services.streams.create_stream("sc", name, StreamConfig(ScalingPolicy.fixed(1), tags=("x",)))
    pages = await _walk(api, "/v1/scopes/sc/streams", "streams", 2, filter_type="tag", filter_value="x")
    assert [item["streamName"] for page in pages for item in page] == tagged
    assert [len(page) for page in pages] == [2, 2, 1]


async def test_defect_9_rest_scope_listing_pages(api: Api, services: Services) -> None:
    scopes = [f"scope{i:02d}" for i in range(12)]
    for scope in scopes:
        await services.scopes.create_scope(scope)
    status, body = await api.call("GET", "/v1/scopes")
    every = [item["scopeName"] for item in body["scopes"]]
    assert status == 200 and "continuationToken" not in body and set(scopes) <= set(every)
    pages = await _walk(api, "/v1/scopes", "scopes", 5)
    assert [item["scopeName"] for page in pages for item in page] == every
    # A full last page is followed by one empty page without a token.
    exact = await _walk(api, "/v1/scopes", "scopes", len(every))
    assert [len(page) for page in exact] == [len(every), 0]


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": str(PAGE_LIMIT + 1)},
        {"limit": "-3"},
        {"limit": "ten"},
        {"continuationToken": "not base64!"},
    ],
)
async def test_defect_9_rest_bad_paging_parameters_are_400(
    api: Api, services: Services, params: dict[str, str]
) -> None:
    await services.scopes.create_scope("sc")
    for path in ("/v1/scopes", "/v1/scopes/sc/streams"):
        status, body = await api.call("GET", path, params=params)
        assert status == 400 and body["code"] == 400, body
