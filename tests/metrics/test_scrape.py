"""The metrics as a scraper sees them: real gRPC and REST calls against `serve`'s servers, then
`/prometheus` over HTTP, parsed with prometheus-client's own parser. The registry is per process
(and pytest-xdist gives this file one), so each test compares a scrape before with one after."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.testing.controller import Services, serving
from app.testing.scale import scale_request
from tests.api.test_grpc_streams import config
from tests.metrics.scraping import P, Served, counted, scrape, value
from tests.support.dataplane import ClientProcess


async def test_control_plane_calls_are_counted_under_pravega_names(served: Served) -> None:
    stub, scope = served.stub, f"m{uuid.uuid4().hex[:8]}"
    info = pb.StreamInfo(scope=scope, stream="s")
    before = await scrape(served.base)

    assert (await stub.createScope(pb.ScopeInfo(scope=scope))).status == pb.CreateScopeStatus.SUCCESS
    assert (await stub.createStream(config(scope, "s", 2))).status == pb.CreateStreamStatus.SUCCESS
    exists = await stub.createStream(config(scope, "s", 2))
    assert exists.status == pb.CreateStreamStatus.STREAM_EXISTS
    started = await stub.scale(scale_request(info, [0], [(0.0, 0.25), (0.25, 0.5)]))
    assert started.status == pb.ScaleResponse.STARTED
    for _ in range(500):
        check = await stub.checkScale(pb.ScaleStatusRequest(streamInfo=info, epoch=started.epoch))
        if check.status == pb.ScaleStatusResponse.SUCCESS:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("scale did not complete")
    created = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=30_000))
    committed = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=created.txnId))
    assert committed.status == pb.TxnStatus.SUCCESS
    with pytest.raises(GRPCError) as missing:
        await stub.getStreamConfiguration(pb.StreamInfo(scope=scope, stream="absent"))
    assert missing.value.status == Status.NOT_FOUND
    async with aiohttp.ClientSession() as http, http.get(f"{served.base}/v1/scopes/{scope}") as resp:
        assert resp.status == 200

    # The commit is counted when the commit worker has merged it, as Pravega's handler counts it.
    after = await counted(served, before, f"{P}transactions_committed_total", 1)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta(f"{P}scope_created_total") == 1
    assert delta(f"{P}stream_created_total") == 1
    assert delta(f"{P}stream_create_failed_total") == 1
    assert delta(f"{P}stream_created_latency_seconds_count") == 1
    assert delta(f"{P}stream_scaled_total") == 1
    assert delta(f"{P}transactions_created_total") == 1
    assert delta(f"{P}transactions_committed_total") == 1
    assert delta(f"{P}transactions_committed_latency_seconds_count") == 1
    assert delta(f"{P}transactions_commit_failed_total") == 0
    grpc = "pgcontroller_grpc_request_duration_seconds_count"
    assert delta(grpc, method="createStream", status="OK") == 2
    assert delta(grpc, method="scale", status="OK") == 1
    assert delta(grpc, method="getStreamConfiguration", status="NOT_FOUND") == 1
    rest = "pgcontroller_rest_request_duration_seconds_count"
    assert delta(rest, method="GET", route="/v1/scopes/{scopeName}", status="200") == 1
    # The scale and the commit each ran a workflow step to its end.
    steps = "pgcontroller_workflow_step_duration_seconds_count"
    assert delta(steps, processor="requests", kind="scale", result="done") >= 1
    # Gauges read from the database at scrape time.
    assert value(after, "pgcontroller_streams") >= 1
    assert delta(f"{P}segment_splits") == 1  # segment 0 split in two
    assert delta(f"{P}segment_merges") == 0
    assert value(after, f"{P}segments_count") >= 3
    assert value(after, "pgcontroller_db_pool_max") >= 1
    assert value(after, "pgcontroller_listen_connected") == 1
    assert value(after, "pgcontroller_buckets_owned", service="requests") >= 1


async def test_metrics_path_answers_the_same_registry(served: Served) -> None:
    prometheus, metrics = await scrape(served.base), await scrape(served.base, "/metrics")
    assert {key[0] for key in prometheus} == {key[0] for key in metrics}


async def test_metrics_off_answers_404(services: Services) -> None:
    async with serving(services, no_metrics=True) as servers, aiohttp.ClientSession() as http:
        for path in ("/prometheus", "/metrics"):
            async with http.get(f"http://127.0.0.1:{servers.rest_port}{path}") as resp:
                assert resp.status == 404
                assert "message" in await resp.json()


async def test_scrape_is_open_with_auth_on(services: Services) -> None:
    async with serving(services, auth_enabled=True) as servers, aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{servers.rest_port}/prometheus") as resp:
            assert resp.status == 200
        async with http.get(f"http://127.0.0.1:{servers.rest_port}/v1/scopes") as resp:
            assert resp.status == 401


async def test_appends_and_reads_of_the_real_client_are_counted_per_store(
    served: Served, tmp_path: Path
) -> None:
    stub, scope = served.stub, f"d{uuid.uuid4().hex[:8]}"
    await stub.createScope(pb.ScopeInfo(scope=scope))
    assert (await stub.createStream(config(scope, "s", 1))).status == pb.CreateStreamStatus.SUCCESS
    before = await scrape(served.base)
    writer = await ClientProcess.start(
        "write", tmp_path, uri=served.grpc_uri, scope=scope, stream="s", count=50, keys=5, size=100
    )
    assert (await writer.result(60))["written"] == 50
    after = await scrape(served.base)
    name = "pgcontroller_segmentstore_appends_total"
    # Earlier tests' controllers (each with its store on its own port) share this process's registry.
    moved = {
        dict(labels)["store"]: count - value(before, name, **dict(labels))
        for (metric, labels), count in after.items()
        if metric == name and count != value(before, name, **dict(labels))
    }
    assert list(moved.values()) == [50]
    (store,) = moved
    size = value(after, "pgcontroller_segmentstore_append_bytes_total", store=store) - value(
        before, "pgcontroller_segmentstore_append_bytes_total", store=store
    )
    # Each event is framed on the wire with an 8-byte header (type and length) before its 100 bytes.
    assert size == 50 * 108

    reader = await ClientProcess.start(
        "read", tmp_path, uri=served.grpc_uri, scope=scope, stream="s", group="rg", readers=1,
        deadline_s=60, stop_after=50, until_end=False, out=str(tmp_path / "read.json"),
    )  # fmt: skip
    assert (await reader.result(90))["read"] == 50
    read = await scrape(served.base)

    def moved_by_read(metric: str) -> float:
        return value(read, metric, store=store) - value(after, metric, store=store)

    # The reader also reads its group's state segment: at least the events' bytes went out.
    assert moved_by_read("pgcontroller_segmentstore_reads_total") >= 1
    assert moved_by_read("pgcontroller_segmentstore_read_bytes_total") >= 50 * 108
