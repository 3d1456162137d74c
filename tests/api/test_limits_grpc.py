"""gRPC message limits and undecodable requests, through the production server construction:
an oversized message is RESOURCE_EXHAUSTED before its body is read, a malformed one is
INVALID_ARGUMENT with one rate-limited log line, and the server keeps serving afterwards."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from app.api.grpc.limits import RateLimitedLog
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.limits import MAX_GRPC_MESSAGE_BYTES
from app.observability.logs import ACCESS_LOGGER
from app.testing.controller import Services
from tests.api.limits_servers import production_servers

LIMITS_LOGGER = "app.api.grpc.limits"


class RawCodec(ProtoCodec):
    """Sends `bytes` as they are (any other message encoded as usual): a client that sends
    whatever it likes."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return bytes(super().encode(message, message_type))


@pytest.fixture
async def port(services: Services) -> AsyncIterator[int]:
    async with production_servers(services) as servers:
        yield servers.grpc_port


@pytest.fixture
async def raw_stub(port: int) -> AsyncIterator[ControllerServiceStub]:
    channel = Channel("127.0.0.1", port, codec=RawCodec())
    try:
        yield ControllerServiceStub(channel)
    finally:
        channel.close()


def scope_info_of_size(size: int) -> bytes:
    """A ScopeInfo message (field 1, a string) of exactly `size` encoded bytes."""
    for header in range(2, 8):
        body = size - header
        encoded = pb.ScopeInfo(scope="a" * body).SerializeToString()
        if len(encoded) == size:
            return encoded
    raise AssertionError(f"no ScopeInfo of {size} bytes")


async def test_defect_9_grpc_message_over_the_limit_is_resource_exhausted(
    raw_stub: ControllerServiceStub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(3):
        with pytest.raises(GRPCError) as raised:
            await raw_stub.createScope(scope_info_of_size(MAX_GRPC_MESSAGE_BYTES + 1), timeout=10)
        assert raised.value.status == Status.RESOURCE_EXHAUSTED
        assert f"exceeds maximum size {MAX_GRPC_MESSAGE_BYTES}" in (raised.value.message or "")
    # Three refusals, one short log line naming the method (besides the access log's line per call).
    records = [r for r in caplog.records if r.name != ACCESS_LOGGER]
    assert [r.name for r in records] == [LIMITS_LOGGER]
    assert "createScope" in records[0].getMessage() and records[0].exc_info is None
    # The connection and the server stay usable.
    ok = await raw_stub.createScope(pb.ScopeInfo(scope="after"), timeout=10)
    assert ok.status == pb.CreateScopeStatus.SUCCESS


async def test_defect_9_grpc_message_at_the_limit_is_read_and_answered(
    raw_stub: ControllerServiceStub,
) -> None:
    # Read and decoded: the name is then refused by validation, as any over-long name is.
    answer = await raw_stub.createScope(scope_info_of_size(MAX_GRPC_MESSAGE_BYTES), timeout=30)
    assert answer.status == pb.CreateScopeStatus.INVALID_SCOPE_NAME


async def test_defect_9_oversized_message_body_is_never_read(raw_stub: ControllerServiceStub) -> None:
    """The prefix announces 100 MB and only 64 KiB follow, the stream left open: a server that read
    the body before judging it would wait for the rest; ours answers from the prefix alone."""
    with pytest.raises(GRPCError) as raised:
        async with raw_stub.createScope.open(timeout=10) as call:
            await call.send_request()
            await call._stream.send_data(struct.pack(">?I", False, 100 * 1024 * 1024) + b"\0" * 65536)
            await asyncio.wait_for(call.recv_message(), 5)
    assert raised.value.status == Status.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff",  # a field tag that is not a valid varint key
        b"\x0a\x10abc",  # a string field announcing 16 bytes, only 3 follow
        b"\x0a\x02\xc3\x28",  # a string field that is not UTF-8
    ],
)
async def test_defect_9_malformed_protobuf_is_invalid_argument_with_one_short_log_line(
    raw_stub: ControllerServiceStub, caplog: pytest.LogCaptureFixture, garbage: bytes
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(20):
        with pytest.raises(GRPCError) as raised:
            await raw_stub.createScope(garbage, timeout=10)
        assert raised.value.status == Status.INVALID_ARGUMENT
        assert "invalid protobuf" in (raised.value.message or "")
    # Twenty refusals, one log line: no traceback, nothing from grpclib's own "Application error"
    # (besides the access log's line per call).
    records = [r for r in caplog.records if r.name != ACCESS_LOGGER]
    assert [r.name for r in records] == [LIMITS_LOGGER]
    (record,) = records
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert "ScopeInfo" in record.getMessage()
    ok = await raw_stub.createScope(pb.ScopeInfo(scope="after"), timeout=10)
    assert ok.status == pb.CreateScopeStatus.SUCCESS


def test_defect_9_refusal_log_says_how_many_lines_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=LIMITS_LOGGER):
        for _ in range(5):
            limited.warning("refused")
        now[0] = 10.0
        limited.warning("refused")
    assert [r.getMessage() for r in caplog.records] == [
        "refused",
        "refused (4 more since the last such line)",
    ]
