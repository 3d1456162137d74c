"""A real grpclib server on a loopback port over real services, and a generated stub to call it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import grpclib.server
import pytest
from grpclib.client import Channel

from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import ControllerService
from tests.support.services import Services


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
    server = grpclib.server.Server([service])
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
