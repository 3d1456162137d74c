"""GET /v1/scopes/{scope}/streams/{stream}/storage (our extension): where a stream's bytes are,
over the real services with the embedded store running a filesystem tier (chunks of 1,000
bytes): appends made over the wire move to the tier, and the view says so, segment by segment;
404 for a missing stream. Every answer is checked against the served OpenAPI document."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.api.rest.stream_storage import extension
from app.clock import SystemClock
from app.domain.records import ScalingPolicy, StreamConfig
from app.segmentstore.wire import commands as wc
from app.services.health import HealthService
from app.services.stream_storage import StreamStorageQuery
from app.store.storage_report import PgSegmentStorageReport
from app.testing.controller import Services, running_controller
from tests.api.conftest_rest import Api
from tests.api.test_rest import assert_error
from tests.segmentstore.server_harness import Client, event, wid

SCOPE, STREAM = "stored", "s"
PATH = f"/v1/scopes/{SCOPE}/streams/{STREAM}/storage"


@pytest.fixture
async def tiered(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[Api, Services]]:
    async with running_controller(
        db_url,
        workers=False,
        tier="filesystem",
        tier_directory=tmp_path / "chunks",
        tier_chunk_bytes=1000,
        tier_flush_interval_s=0.05,
    ) as services:
        query = StreamStorageQuery(services.stream_store, PgSegmentStorageReport(services.pool))
        app: Any = create_app(
            services.scopes,
            services.streams,
            HealthService(SystemClock()),
            services.lifecycle,
            services.transactions,
            extensions=[extension(query)],
        )
        async with TestClient(TestServer(app)) as client:
            yield Api(client, app), services


async def test_the_view_says_which_bytes_moved_to_the_tier(tiered: tuple[Api, Services]) -> None:
    api, services = tiered
    await services.scopes.create_scope(SCOPE)
    await services.streams.create_stream(SCOPE, STREAM, StreamConfig(ScalingPolicy.fixed(2)))
    status, empty = await api.call("GET", PATH)
    assert status == 200
    assert [s["segment"] for s in empty["segments"]] == [
        f"{SCOPE}/{STREAM}/0.#epoch.0",
        f"{SCOPE}/{STREAM}/1.#epoch.0",
    ]
    assert (empty["postgresBytes"], empty["tieredBytes"]) == (0, 0)

    store = services.runtime.store
    assert store is not None
    client = await Client.connect(store.address)
    try:
        segment, writer = f"{SCOPE}/{STREAM}/0.#epoch.0", wid()
        await client.setup(segment, writer)
        for number in range(1, 31):
            assert isinstance(await client.append(writer, event(b"x" * 200), number), wc.DataAppended)
    finally:
        await client.close()
    written = 30 * (200 + 8)

    deadline = time.monotonic() + 20
    while True:
        status, body = await api.call("GET", PATH)
        first = body["segments"][0]
        if first["tieredBytes"] >= 5000 and first["postgresBytes"] < 1000:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.1)
    assert first["length"] == written and first["postgresBytes"] + first["tieredBytes"] == written
    assert first["tieredChunks"] >= 5 and first["kind"] == "stream" and not first["sealed"]
    assert (body["postgresBytes"], body["tieredBytes"]) == (first["postgresBytes"], first["tieredBytes"])
    assert body["segments"][1]["length"] == 0


async def test_a_missing_stream_is_404(tiered: tuple[Api, Services]) -> None:
    api, services = tiered
    await services.scopes.create_scope(SCOPE)
    status, body = await api.call("GET", PATH)
    assert_error(status, body, 404)
