"""The controller's gRPC served over a running controller's services on a loopback port, for the
tests that need it: one construction (the production size limit and codec, as `serve` builds it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from grpclib.client import Channel

from app.api.grpc.limits import bounded_server
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import ControllerService
from app.security.delegation import DelegationTokens
from app.testing.controller import Services
from app.wiring import grpc_extensions


@asynccontextmanager
async def grpc_port(
    services: Services,
    extensions: Sequence[object] | None = None,
    tokens: DelegationTokens | None = None,
) -> AsyncIterator[int]:
    """The ControllerService over `services` listening on a loopback port, yielded; `extensions`
    serve further RPCs (None: the controller's own, as `serve` wires them); `tokens` signs the
    delegation tokens of its answers (None: "" as with auth off)."""
    if extensions is None:
        extensions = grpc_extensions(services.controller)
    service = ControllerService(
        services.scopes,
        services.streams,
        services.segments,
        services.cluster,
        services.lifecycle,
        services.transactions,
        extensions,
        tokens=tokens,
    )
    server = bounded_server([service])
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    try:
        yield server._server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def grpc_stub(port: int) -> AsyncIterator[ControllerServiceStub]:
    """A stub on a channel to the controller's gRPC at loopback `port`, closed after."""
    channel = Channel("127.0.0.1", port)
    try:
        yield ControllerServiceStub(channel)
    finally:
        channel.close()
