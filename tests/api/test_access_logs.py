"""Access logs and request ids over real listeners (`serving`, as `serve` starts them): one
`pgcontroller.access` line per REST request and gRPC call, and Pravega's `requestId` tracing
metadata carried through the request queue into the workflow's log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import segment_id
from app.observability.access_sampling import sample_access_log
from app.observability.logs import ACCESS_LOGGER, ContextFilter, JsonFormatter
from app.testing.controller import Services, serving
from app.testing.scale import scale_request
from tests.api.test_grpc_streams import config


class Captured:
    def __init__(self, out: io.StringIO) -> None:
        self._out = out

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._out.getvalue().splitlines()]

    def access(self) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["logger"] == ACCESS_LOGGER]


@contextmanager
def captured(level: int = logging.INFO) -> Iterator[Captured]:
    """Every record from here on as the JSON lines `--log-format json` writes."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield Captured(out)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


async def until(check: Any, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s * 100)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_rest_access_line_has_method_path_status_duration_request_id_remote(services: Services) -> None:
    with captured() as logs:
        async with serving(services) as servers, aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{servers.rest_port}"
            async with http.get(f"{base}/v1/scopes", headers={"X-Request-Id": "rest-1"}) as response:
                assert response.status == 200
                assert response.headers["X-Request-Id"] == "rest-1"
            async with http.get(f"{base}/v1/scopes/nope?secret=x") as response:
                assert response.status == 404
                made = response.headers["X-Request-Id"]
            await until(lambda: len(logs.access()) >= 2)
    ok, missing = logs.access()
    assert ok["level"] == "INFO" and ok["kind"] == "rest"
    assert (ok["method"], ok["path"], ok["status"], ok["request_id"]) == ("GET", "/v1/scopes", 200, "rest-1")
    assert ok["remote"] == "127.0.0.1" and ok["duration_ms"] >= 0
    assert (missing["path"], missing["status"], missing["request_id"]) == ("/v1/scopes/nope", 404, made)
    assert "secret" not in json.dumps(missing)


async def test_grpc_access_line_has_method_status_duration_request_id_peer(services: Services) -> None:
    with captured() as logs:
        async with serving(services) as servers:
            channel = Channel("127.0.0.1", servers.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                tags = {"requestid": "9001", "requestdescriptor": "createScope-sc"}
                created = await stub.createScope(pb.ScopeInfo(scope="sc"), metadata=tags)
                assert created.status == pb.CreateScopeStatus.SUCCESS
                bad = await stub.createScope(pb.ScopeInfo(scope="bad name!"))
                assert bad.status == pb.CreateScopeStatus.INVALID_SCOPE_NAME
                await until(lambda: len(logs.access()) >= 2)
            finally:
                channel.close()
    first, second = logs.access()
    assert first["kind"] == "grpc" and first["level"] == "INFO"
    assert (first["method"], first["status"], first["request_id"]) == ("createScope", "OK", "9001")
    assert first["request_descriptor"] == "createScope-sc"
    assert first["peer"].startswith("127.0.0.1:") and first["duration_ms"] >= 0
    assert second["method"] == "createScope" and second["request_id"] not in ("", "9001")


@contextmanager
def access_records_made() -> Iterator[list[logging.LogRecord]]:
    """Every record made for the access logger from here on (suppressed or not)."""
    made: list[logging.LogRecord] = []
    factory = logging.getLogRecordFactory()

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if record.name == ACCESS_LOGGER:
            made.append(record)
        return record

    logging.setLogRecordFactory(counting)
    try:
        yield made
    finally:
        logging.setLogRecordFactory(factory)


async def test_sampled_lines_are_never_made_and_are_counted_in_the_summary(services: Services) -> None:
    """Past a window's share, a REST request or gRPC call makes no log record at all (making one
    per call was most of the access log's cost under a steady load), and the summary counts it."""
    with captured() as logs, access_records_made() as made:
        remove = sample_access_log(per_window=2)
        try:
            async with serving(services) as servers, aiohttp.ClientSession() as http:
                for _ in range(12):
                    async with http.get(f"http://127.0.0.1:{servers.rest_port}/v1/scopes") as response:
                        assert response.status == 200
                channel = Channel("127.0.0.1", servers.grpc_port)
                try:
                    stub = ControllerServiceStub(channel)
                    for _ in range(12):
                        listed = await stub.listScopes(pb.ScopesRequest())
                        assert listed is not None
                finally:
                    channel.close()
                await until(lambda: len(logs.access()) >= 4)
            written = len(made)
        finally:
            remove()
    lines = logs.access()
    assert [(line["kind"], line.get("path", line.get("method"))) for line in lines[:4]] == [
        ("rest", "/v1/scopes"),
        ("rest", "/v1/scopes"),
        ("grpc", "listScopes"),
        ("grpc", "listScopes"),
    ]
    assert written == 4, [record.getMessage() for record in made]
    summaries = sorted(line["message"] for line in lines[4:])
    assert len(summaries) == 2
    assert summaries[0].startswith("REST GET /v1/scopes 200 from 127.0.0.1: 10 more alike lines")
    assert summaries[1].startswith("gRPC listScopes OK from 127.0.0.1: 10 more alike lines")


async def test_no_access_log_silences_the_lines_but_keeps_request_ids(services: Services) -> None:
    try:
        with captured() as logs:
            async with serving(services, no_access_log=True) as servers, aiohttp.ClientSession() as http:
                response = await http.get(f"http://127.0.0.1:{servers.rest_port}/v1/scopes")
                assert response.status == 200 and response.headers["X-Request-Id"]
                response.release()
        assert logs.access() == []
    finally:
        logging.getLogger(ACCESS_LOGGER).setLevel(logging.NOTSET)


async def test_pravega_request_id_reaches_the_scale_workflow_and_its_log_lines(services: Services) -> None:
    info = pb.StreamInfo(scope="sc", stream="s")
    with captured(logging.DEBUG) as logs:
        async with serving(services) as servers:
            channel = Channel("127.0.0.1", servers.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope="sc"))
                assert (await stub.createStream(config("sc", "s", 2))).status == pb.CreateStreamStatus.SUCCESS
                tags = {"requestid": "31337", "requestdescriptor": "scaleStream-sc-s"}
                request = scale_request(info, [segment_id(1, 0)], [(0.5, 0.75), (0.75, 1.0)])
                started = await stub.scale(request, metadata=tags)
                assert started.status == pb.ScaleResponse.STARTED

                def workflow_lines() -> list[dict[str, Any]]:
                    return [
                        line
                        for line in logs.lines()
                        if line["logger"] == "pgcontroller.requests" and line.get("request_id") == "31337"
                    ]

                await until(lambda: bool(workflow_lines()))
            finally:
                channel.close()
    line = workflow_lines()[0]
    assert "scale" in line["message"] and (line["scope"], line["stream"]) == ("sc", "s")
