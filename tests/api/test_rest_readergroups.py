"""Pravega's REST `readergroups` paths over the real services, with the reader-group request
handlers running behind a real dispatcher: listing a scope's groups, one group's properties,
deleting a group; every answer is checked against the served OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.api.rest.readergroups import extension
from app.clock import SystemClock
from app.domain.readergroups import ReaderGroupConfig, ScopedStream, StreamDataRetention
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.health import HealthService
from app.services.readergroups import CreateStatus
from tests.api.conftest_rest import Api
from tests.api.test_rest import assert_error
from tests.support.readergroups import Rig, rig
from tests.support.services import running_controller

SC = "rest"
GROUPS = f"/v1/scopes/{SC}/readergroups"


@dataclass
class Served:
    api: Api
    r: Rig


@pytest.fixture
async def w(db_url: str) -> AsyncIterator[Served]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        for name in ("s1", "s2"):
            await services.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(1)))
        async with rig(services, workers=True) as r:
            app = create_app(
                services.scopes,
                services.streams,
                HealthService(SystemClock()),
                services.lifecycle,
                services.transactions,
                extensions=[extension(r.service)],
            )
            async with TestClient(TestServer(app)) as client:
                yield Served(Api(client, app), r)


async def make_group(
    w: Served, name: str, *streams: str, retention: StreamDataRetention = StreamDataRetention.NONE
) -> None:
    config = ReaderGroupConfig({ScopedStream(SC, s): {} for s in streams}, retention=retention)
    result = await w.r.service.create_reader_group(SC, name, config)
    assert result.status is CreateStatus.SUCCESS


async def test_list_reader_groups(w: Served) -> None:
    assert await w.api.call("GET", GROUPS) == (200, {"readerGroups": []})
    for name in ("zeta", "alpha"):
        await make_group(w, name, "s1")
    assert await w.api.call("GET", GROUPS) == (
        200,
        {"readerGroups": [{"readerGroupName": "alpha"}, {"readerGroupName": "zeta"}]},
    )
    status, body = await w.api.call("GET", "/v1/scopes/nosuch/readergroups")
    assert_error(status, body, 404)


async def test_get_reader_group(w: Served) -> None:
    await make_group(w, "rg", "s2", "s1")
    assert await w.api.call("GET", f"{GROUPS}/rg") == (
        200,
        {
            "scopeName": SC,
            "readerGroupName": "rg",
            "streamList": [f"{SC}/s2", f"{SC}/s1"],
            "onlineReaderIds": [],
        },
    )
    status, body = await w.api.call("GET", f"{GROUPS}/none")
    assert_error(status, body, 404)
    status, body = await w.api.call("GET", "/v1/scopes/nosuch/readergroups/rg")
    assert_error(status, body, 404)


async def test_delete_reader_group(w: Served) -> None:
    await make_group(w, "rg", "s1", retention=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT)
    assert await w.r.subscribers.list_subscribers(SC, "s1") == [f"{SC}/rg"]
    assert await w.api.call("DELETE", f"{GROUPS}/rg") == (204, None)
    assert await w.r.store.get_reader_group(SC, "rg") is None
    assert await w.r.subscribers.list_subscribers(SC, "s1") == []
    assert not await w.r.s.streams.stream_exists(SC, "_RGrg")
    status, body = await w.api.call("DELETE", f"{GROUPS}/rg")
    assert_error(status, body, 404)
    assert await w.api.call("GET", GROUPS) == (200, {"readerGroups": []})


async def test_other_methods_are_405(w: Served) -> None:
    status, body = await w.api.call("POST", GROUPS, json_body={})
    assert_error(status, body, 405)
    status, body = await w.api.call("PUT", f"{GROUPS}/rg", json_body={})
    assert_error(status, body, 405)
