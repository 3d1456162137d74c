"""Pravega's REST `readergroups` paths over the real services, with the reader-group request
handlers running behind a real dispatcher: listing a scope's groups, one group's properties,
deleting a group; every answer is checked against the served OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.api.rest.readergroups import extension
from app.domain.readergroups import ReaderGroupConfig, ScopedStream, StreamDataRetention
from app.domain.records import ScalingPolicy, StreamConfig
from app.services.readergroups import CreateStatus
from app.testing.controller import running_controller
from tests.api.conftest import Served, serve
from tests.api.test_rest import assert_error
from tests.support.readergroups import Rig, rig

SC = "rest"
GROUPS = f"/v1/scopes/{SC}/readergroups"


@pytest.fixture
async def w(db_url: str) -> AsyncIterator[Served[Rig]]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        for name in ("s1", "s2"):
            await services.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(1)))
        async with (
            rig(services, workers=True) as r,
            serve(services, r, rest_extensions=[extension(r.service)]) as served,
        ):
            yield served


async def make_group(
    w: Served[Rig], name: str, *streams: str, retention: StreamDataRetention = StreamDataRetention.NONE
) -> None:
    config = ReaderGroupConfig({ScopedStream(SC, s): {} for s in streams}, retention=retention)
    result = await w.subject.service.create_reader_group(SC, name, config)
    assert result.status is CreateStatus.SUCCESS


async def test_list_reader_groups(w: Served[Rig]) -> None:
    assert await w.api.call("GET", GROUPS) == (200, {"readerGroups": []})
    for name in ("zeta", "alpha"):
        await make_group(w, name, "s1")
    assert await w.api.call("GET", GROUPS) == (
        200,
        {"readerGroups": [{"readerGroupName": "alpha"}, {"readerGroupName": "zeta"}]},
    )
    status, body = await w.api.call("GET", "/v1/scopes/nosuch/readergroups")
    assert_error(status, body, 404)


async def test_get_reader_group(w: Served[Rig]) -> None:
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


async def test_delete_reader_group(w: Served[Rig]) -> None:
    await make_group(w, "rg", "s1", retention=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT)
    assert await w.subject.subscribers.list_subscribers(SC, "s1") == [f"{SC}/rg"]
    assert await w.api.call("DELETE", f"{GROUPS}/rg") == (204, None)
    assert await w.subject.store.get_reader_group(SC, "rg") is None
    assert await w.subject.subscribers.list_subscribers(SC, "s1") == []
    assert not await w.subject.s.streams.stream_exists(SC, "_RGrg")
    status, body = await w.api.call("DELETE", f"{GROUPS}/rg")
    assert_error(status, body, 404)
    assert await w.api.call("GET", GROUPS) == (200, {"readerGroups": []})


async def test_other_methods_are_405(w: Served[Rig]) -> None:
    status, body = await w.api.call("POST", GROUPS, json_body={})
    assert_error(status, body, 405)
    status, body = await w.api.call("PUT", f"{GROUPS}/rg", json_body={})
    assert_error(status, body, 405)
