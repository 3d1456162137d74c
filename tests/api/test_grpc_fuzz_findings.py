"""Regressions for what the gRPC fuzz campaign (test_grpc_fuzz.py) found in code no other slice owns,
each reduced to its smallest call."""

from __future__ import annotations

import asyncio

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub

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
        assert "malformed continuation token" in (refused.value.message or "")
        assert len(refused.value.message or "") < 300
