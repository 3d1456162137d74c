"""Regressions for what the gRPC fuzz campaign (test_grpc_fuzz.py) found in code no other slice owns,
each reduced to its smallest call."""

from __future__ import annotations

import asyncio

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.errors import MAX_DETAIL_CHARS
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.controller import Services
from app.wiring import grpc_extensions
from tests.api.conftest import served

LONG_TOKENS = ["x" * 65_535, "\x00" * 65_928]


@pytest.mark.parametrize("token", LONG_TOKENS, ids=["ascii", "nul"])
async def test_fuzz_finding_a_long_malformed_token_is_refused_without_echoing_it(
    stub: ControllerServiceStub, token: str
) -> None:
    """The error quoted the whole token; gRPC carries that text in a trailer, so the call broke
    (connection lost) or never ended (the client waited out its deadline)."""
    await stub.createScope(pb.ScopeInfo(scope="sc"))
    calls = [
        stub.listScopes(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=token)), timeout=5),
        stub.listStreamsInScope(
            pb.StreamsInScopeRequest(
                scope=pb.ScopeInfo(scope="sc"), continuationToken=pb.ContinuationToken(token=token)
            ),
            timeout=5,
        ),
    ]
    for call in calls:
        with pytest.raises(GRPCError) as refused:
            await asyncio.wait_for(call, 10)
        assert refused.value.status == Status.INVALID_ARGUMENT
        # Refused by the paging code ("malformed continuation token") or, for NUL, by the input gate
        # before it ("continuationToken.token must not contain the NUL character"): either names it.
        assert "continuation" in (refused.value.message or "").lower()
        assert len(refused.value.message or "") < 300


async def test_fuzz_finding_an_error_quoting_a_long_input_stays_within_a_header(services: Services) -> None:
    """createReaderGroup with a 70,000-character readerGroupId: the error quoted the whole id in the
    status trailer; the answer is INVALID_ARGUMENT with a bounded detail."""
    async with served(services, grpc_extensions(services.controller)) as stub:
        await stub.createScope(pb.ScopeInfo(scope="sc"))
        group = pb.ReaderGroupConfiguration(
            scope="sc",
            readerGroupName="rg",
            maxOutstandingCheckpointRequest=1,
            readerGroupId="x" * 70_000,
            startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="sc", stream="s"))],
        )
        with pytest.raises(GRPCError) as refused:
            await asyncio.wait_for(stub.createReaderGroup(group, timeout=5), 10)
    assert refused.value.status == Status.INVALID_ARGUMENT
    assert (refused.value.message or "").startswith("reader group id ")
    assert len(refused.value.message or "") <= MAX_DETAIL_CHARS + 40
