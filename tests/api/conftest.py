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

from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.services.health import HealthService
from app.testing.controller import Services
from tests.api.conftest_rest import Api
from tests.support.grpc_served import grpc_port, grpc_stub

Subject = TypeVar("Subject")
RestExtension = Callable[[web.Application], None]


@asynccontextmanager
async def served(
    services: Services, extensions: Sequence[object] = ()
) -> AsyncIterator[ControllerServiceStub]:
    """The ControllerService over `services` on a loopback port, and a stub connected to it;
    `extensions` are the capability objects serving further RPCs (see ControllerService)."""
    async with grpc_port(services, extensions) as port, grpc_stub(port) as connected:
        yield connected


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
