"""A gRPC call leaves no reference cycle behind on the server: what a call allocates is freed by
reference counting as it ends. A cycle per call survived into the collector's oldest generation
and made full passes of tens of milliseconds the p99 of the hot reads (docs/operations.md,
"The request tail")."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import grpclib.protocol
import pytest
from grpclib.client import Channel
from grpclib.health.service import Health
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest

from app.api.grpc.limits import bounded_server

CALLS = 20


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic pass may free (and so hide) a cycle while the calls run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _cyclic_garbage() -> list[object]:
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_calls_through_the_bounded_server_leave_no_cycles(collector_off: None) -> None:
    server = bounded_server([Health()])
    await server.start("127.0.0.1", 0)
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    channel = Channel("127.0.0.1", port)
    try:
        stub = HealthStub(channel)
        await stub.Check(HealthCheckRequest())  # the connection's own objects come first
        _cyclic_garbage()
        for _ in range(CALLS):
            await stub.Check(HealthCheckRequest())
        streams = [o for o in _cyclic_garbage() if isinstance(o, grpclib.protocol.Stream)]
        assert streams == [], f"{len(streams)} HTTP/2 streams of {CALLS} calls were left in cycles"
    finally:
        channel.close()
        server.close()
        await server.wait_closed()
