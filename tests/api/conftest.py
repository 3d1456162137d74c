"""Real services served in-process for the API tests: a grpclib server on a loopback port with a
generated stub to call it (`served`), and both surfaces at once, gRPC and REST, behind one `Served`
(`serve`). Each test gets its own listeners, closed before its services are."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from grpclib.client import Channel

from app.api.grpc.limits import bounded_server
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import ControllerService
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.services.health import HealthService
from app.testing.controller import Services
from tests.api.conftest_rest import Api

Subject = TypeVar("Subject")
RestExtension = Callable[[web.Application], None]


@asynccontextmanager
async def served(
    services: Services, extensions: Sequence[object] = ()
) -> AsyncIterator[ControllerServiceStub]:
    """The ControllerService over `services` on a loopback port, and a stub connected to it;
    `extensions` are the capability objects serving further RPCs (see ControllerService)."""
    service = ControllerService(
        services.scopes,
        services.streams,
        services.segments,
        services.cluster,
        services.lifecycle,
        services.transactions,
        extensions,
    )
    # The production construction (size limit, checked codec), as `serve` builds it.
    server = bounded_server([service])
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    port = server._server.sockets[0].getsockname()[1]
    channel = Channel("127.0.0.1", port)
    try:
        yield ControllerServiceStub(channel)
    finally:
        channel.close()
        server.close()
        await server.wait_closed()


@pytest.fixture
async def stub(services: Services) -> AsyncIterator[ControllerServiceStub]:
    async with served(services) as connected:
        yield connected


@asynccontextmanager
async def rest_api(services: Services, extensions: Sequence[RestExtension] = ()) -> AsyncIterator[Api]:
    """The REST app over `services` on aiohttp's test server, and a client checking every answer
    against the served OpenAPI document; `extensions` contribute further routes (see create_app)."""
    app = create_app(
        services.scopes,
        services.streams,
        HealthService(SystemClock()),
        services.lifecycle,
        services.transactions,
        extensions,
    )
    async with TestClient(TestServer(app)) as client:
        yield Api(client, app)


@dataclass(frozen=True)
class Served(Generic[Subject]):
    """`services` answering over gRPC (`stub`) and REST (`api`) in this process, and `subject`: what
    the test also drives directly (a store, a service, a reader-group rig; None when nothing)."""

    services: Services
    subject: Subject
    stub: ControllerServiceStub
    api: Api


@asynccontextmanager
async def serve(
    services: Services,
    subject: Subject,
    *,
    grpc_extensions: Sequence[object] = (),
    rest_extensions: Sequence[RestExtension] = (),
) -> AsyncIterator[Served[Subject]]:
    """Both surfaces over `services`, whichever the test calls: two loopback listeners are cheap,
    and one helper then serves every API test."""
    async with served(services, grpc_extensions) as stub, rest_api(services, rest_extensions) as api:
        yield Served(services, subject, stub, api)
