"""No error answer carries internals (defect 5): every gRPC method and every REST route, served as
`serve` serves them, is called with missing, existing and NUL-bearing names, and bodies that are
empty, malformed or refused, against a healthy database and against one that cannot be reached.
Every error's message, details, body and headers are scanned for SQL, driver text, the database's
host and port, file paths and tracebacks; input the database refuses is never an outage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import asyncpg
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from grpclib.client import Channel, UnaryUnaryMethod
from grpclib.exceptions import GRPCError

from app.api.errors import message_for
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.domain.errors import InvalidInput
from app.services.health import HealthService, HealthStatus
from app.store.errors import domain_error
from app.store.pool import create_pool
from app.testing.controller import TEST_SETTINGS, running_controller
from app.wiring import Controller, open_resources, rest_extensions, start_servers, wire

NAME = "leaks"
NUL = "le\x00aks"
CALL_TIMEOUT_S = 15.0

# What no client may ever read: SQL, driver and exception names, server text, paths, tracebacks.
_FORBIDDEN = re.compile(
    r"asyncpg|postgres|psycopg|sqlalchemy|SQLSTATE|Traceback|File \"|\.py\b|/tmp/|/work/|/usr/"
    r"|\bSELECT\b|\bINSERT\b|\bUPDATE\s+\w|\bDELETE\s+FROM\b|\bWHERE\b|\bRETURNING\b"
    r"|violates|constraint|duplicate key|Key \(|relation \"|table \"|column \"|query argument|\$\d"
    r"|invalid byte sequence|UTF8|Errno|Connect call|refused|[A-Z]\w*(Error|Exception)\b",
)


@dataclass(frozen=True)
class Answer:
    surface: str
    call: str
    status: int | str
    text: str
    outage: bool


def _leaks(answer: Answer, db_hosts: tuple[str, ...]) -> list[str]:
    found = [m.group(0) for m in _FORBIDDEN.finditer(answer.text)]
    found += [host for host in db_hosts if host in answer.text]
    return found


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def _served(controller: Controller, health: HealthService) -> AsyncIterator[tuple[int, int]]:
    settings = replace(TEST_SETTINGS, grpc_host="127.0.0.1", grpc_port=0, rest_host="127.0.0.1", rest_port=0)
    servers = await start_servers(settings, controller, health)
    try:
        yield servers.grpc_port, servers.rest_port
    finally:
        await servers.close(2.0)


def _filled(cls: type[Message], text: str, depth: int = 0) -> Message:
    """Every singular string field (nested ones too) set to `text`; numbers left at zero."""
    message = cls()
    for field in cls.DESCRIPTOR.fields:
        if field.is_repeated:
            continue
        if field.type == FieldDescriptor.TYPE_STRING:
            setattr(message, field.name, text)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth < 3:
            nested = type(getattr(message, field.name))
            getattr(message, field.name).CopyFrom(_filled(nested, text, depth + 1))
    return message


def _grpc_calls(stub: ControllerServiceStub) -> Iterator[tuple[str, UnaryUnaryMethod[Any, Any], Message]]:
    for name, method in sorted(vars(stub).items()):
        if isinstance(method, UnaryUnaryMethod):
            cls = method.request_type
            yield f"{name}(empty)", method, cls()
            for text in (NAME, "missing", NUL):
                yield f"{name}({text!r})", method, _filled(cls, text)


async def _grpc_answers(port: int, outage: bool) -> list[Answer]:
    answers: list[Answer] = []
    channel = Channel("127.0.0.1", port)
    try:
        stub = ControllerServiceStub(channel)
        for call, method, request in _grpc_calls(stub):
            try:
                await asyncio.wait_for(method(request), CALL_TIMEOUT_S)
            except GRPCError as exc:
                text = f"{exc.message or ''} {exc.details!r}"
                answers.append(Answer("grpc", call, exc.status.name, text, outage))
    finally:
        channel.close()
    return answers


_BODIES: tuple[bytes | None, ...] = (
    None,
    b"{}",
    b"not json",
    json.dumps(
        {
            "scopeName": NUL,
            "streamName": NUL,
            "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
            "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 1},
            "streamTags": {"tags": [NUL]},
            "tags": [NUL],
            "name": NUL,
        }
    ).encode(),
)


def _rest_calls(routes: list[tuple[str, str]]) -> Iterator[tuple[str, str, bytes | None]]:
    for method, path in routes:
        for value in (NAME, "missing", quote(NUL, safe=""), "99999999999999999999"):
            url = re.sub(r"\{[^}]+\}", value, path)
            bodies = _BODIES if method in ("POST", "PUT", "PATCH") else (None,)
            for body in bodies:
                yield method, url, body


async def _rest_answers(port: int, routes: list[tuple[str, str]], outage: bool) -> list[Answer]:
    answers: list[Answer] = []
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        for method, url, body in _rest_calls(routes):
            headers = {"Content-Type": "application/json"} if body is not None else {}
            async with asyncio.timeout(CALL_TIMEOUT_S):
                async with http.request(method, url, data=body, headers=headers) as response:
                    text = await response.text()
                    if response.status >= 400 or "/health" in url:
                        header_text = " ".join(f"{k}: {v}" for k, v in response.headers.items())
                        call = f"{method} {url} {(body or b'')[:40]!r}"
                        answers.append(Answer("rest", call, response.status, f"{text} {header_text}", outage))
    return answers


def _routes(controller: Controller, health: HealthService) -> list[tuple[str, str]]:
    app = create_app(
        controller.scopes,
        controller.streams,
        health,
        controller.lifecycle,
        controller.transactions,
        rest_extensions(controller),
    )
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None}
    return sorted((m, p) for m, p in routes if m != "HEAD")


@pytest.fixture
async def healthy(db_url: str) -> AsyncIterator[Controller]:
    async with running_controller(db_url, completion_timeout_s=2.0) as services:
        await services.scopes.create_scope(NAME)
        yield services.controller


async def test_defect_5_no_error_answer_carries_sql_driver_text_hosts_paths_or_tracebacks(
    db_url: str, healthy: Controller
) -> None:
    parts = urlsplit(db_url)
    health = HealthService(SystemClock())
    health.set("metadata-store", HealthStatus.UP)
    answers: list[Answer] = []
    async with _served(healthy, health) as (grpc_port, rest_port):
        channel = Channel("127.0.0.1", grpc_port)
        try:
            config = pb.StreamConfig(
                streamInfo=pb.StreamInfo(scope=NAME, stream=NAME),
                scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
            )
            created = await ControllerServiceStub(channel).createStream(config)
            assert created.status == pb.CreateStreamStatus.SUCCESS
        finally:
            channel.close()
        answers += await _grpc_answers(grpc_port, outage=False)
        answers += await _rest_answers(rest_port, _routes(healthy, health), outage=False)

    # The same controller code over a pool whose server cannot be reached: every call that needs
    # the database is an outage, and says so without naming where the database is.
    port = _closed_port()
    unreachable = f"postgresql://pgcontroller@127.0.0.1:{port}/nowhere"
    pool = await create_pool(unreachable, min_size=0, max_size=2)
    try:
        # Nothing reaches a database here, so the test settings' counts serve as they are.
        settings = replace(TEST_SETTINGS, db_url=unreachable, instance_id="leaks-unreachable")
        down = wire(settings, open_resources(settings, unreachable, pool))
        down_health = HealthService(SystemClock())
        down_health.set("metadata-store", HealthStatus.DOWN, error="the metadata store is unavailable")
        async with _served(down, down_health) as (grpc_port, rest_port):
            answers += await _grpc_answers(grpc_port, outage=True)
            answers += await _rest_answers(rest_port, _routes(down, down_health), outage=True)
    finally:
        await pool.close()

    db_hosts = (f":{parts.port}", f":{port}", f"{parts.hostname}:")
    leaking = [(a, _leaks(a, db_hosts)) for a in answers if _leaks(a, db_hosts)]
    assert not leaking, "\n".join(
        f"{a.surface} {a.call} -> {a.status}: {a.text[:300]} {found}" for a, found in leaking
    )

    # Input the database refuses (NUL in a name) is the caller's error, never an outage.
    refused_input = [
        a
        for a in answers
        if not a.outage and (a.status in ("UNAVAILABLE", 503)) and ("00" in a.call or NUL in a.call)
    ]
    assert not refused_input, "\n".join(
        f"{a.surface} {a.call} -> {a.status}: {a.text[:200]}" for a in refused_input
    )

    # The scan saw what it is meant to see: outages on both surfaces, many errors in all.
    outages = {a.surface for a in answers if a.outage and a.status in ("UNAVAILABLE", 503)}
    assert outages == {"grpc", "rest"}, outages
    assert len(answers) > 300, len(answers)


def test_defect_5_the_log_keeps_what_the_client_is_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    """The client's message names an error id; the log line with that id has the driver's text."""
    driver = asyncpg.UniqueViolationError('duplicate key value violates unique constraint "streams_pkey"')
    error = domain_error(driver)
    assert error is not None
    with caplog.at_level(logging.WARNING, logger="app.api.errors"):
        message = message_for(error)
    found = re.fullmatch(r"the record exists already \(error id ([0-9a-f]{12})\)", message)
    assert found is not None, message
    logged = [r.getMessage() for r in caplog.records if found.group(1) in r.getMessage()]
    assert len(logged) == 1 and "streams_pkey" in logged[0] and "UniqueViolationError" in logged[0], logged
    # Errors that no adapter annotated (the caller's own mistakes) go out as they are, unlogged.
    assert message_for(InvalidInput("stream name is empty")) == "stream name is empty"
