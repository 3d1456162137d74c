"""The real Pravega Python client against a served pgcontroller (gRPC over loopback)."""

from __future__ import annotations

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess
from tests.support.client import run_client
from tests.support.client_scenarios import SCENARIOS

pytestmark = pytest.mark.interop
I64_MAX = 9223372036854775807


async def stream_config(served: ServedProcess, scope: str, stream: str) -> pb.StreamConfig:
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        return await ControllerServiceStub(channel).getStreamConfiguration(
            pb.StreamInfo(scope=scope, stream=stream)
        )
    finally:
        channel.close()


async def test_create_scope_and_list_scopes(served: ServedProcess) -> None:
    result = await run_client(served.grpc_uri, SCENARIOS["create_scope_and_list_scopes"])
    assert result["first"] is True
    assert result["again"] is False
    assert result["beta"] is True
    assert "error" in result["invalid"]
    # Pravega's internal scope is listed, once, after the scopes made (it holds no streams here).
    assert result["scopes"] == ["alpha", "beta", "_system"]
    assert result["stream"] is True and any("st" in s for s in result["first_streams"])
    assert result["system_streams"] == []


async def test_create_stream_with_policies_and_tags(served: ServedProcess) -> None:
    result = await run_client(served.grpc_uri, SCENARIOS["create_stream_with_policies_and_tags"])
    assert result["fixed"] is True and result["by_data"] is True and result["by_events"] is True
    assert result["plain"] is True and result["duplicate"] is False
    assert "error" in result["no_scope"]
    assert sorted(result["tags_data"]) == ["blue", "red"]
    assert result["tags_events"] == []
    assert result["tags_fixed"] == []
    assert "error" in result["unknown_tags"]
    listed = " ".join(result["streams"])
    for name in ("fixed", "by-data", "by-events", "plain", "_MARKfixed", "_MARKplain"):
        assert name in listed

    by_data = await stream_config(served, "sc", "by-data")
    assert by_data.scalingPolicy.scaleType == pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC
    assert (by_data.scalingPolicy.targetRate, by_data.scalingPolicy.scaleFactor) == (100, 2)
    assert by_data.scalingPolicy.minNumSegments == 4
    assert by_data.retentionPolicy.retentionType == pb.RetentionPolicy.SIZE
    assert by_data.retentionPolicy.retentionParam == 1 << 30
    assert by_data.retentionPolicy.retentionMax == I64_MAX
    by_events = await stream_config(served, "sc", "by-events")
    assert by_events.scalingPolicy.scaleType == pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC
    assert by_events.retentionPolicy.retentionType == pb.RetentionPolicy.TIME
    assert by_events.retentionPolicy.retentionParam == 3600000
    fixed = await stream_config(served, "sc", "fixed")
    assert fixed.scalingPolicy.minNumSegments == 3
    assert not fixed.HasField("retentionPolicy")


async def test_delete_scope_non_empty_then_empty(served: ServedProcess) -> None:
    result = await run_client(served.grpc_uri, SCENARIOS["delete_scope_non_empty_then_empty"])
    assert "error" in result["non_empty"]
    assert result["empty"] is True
    assert result["missing"] is False
    assert result["scopes"] == ["_system", "full"]


async def test_update_seal_and_delete_stream(served: ServedProcess) -> None:
    result = await run_client(served.grpc_uri, SCENARIOS["update_seal_and_delete_stream"])
    assert result["update"] is True
    assert result["tags"] == ["green"]
    assert "error" in result["update_missing"]
    assert "error" in result["delete_unsealed"]
    assert result["seal"] is True and result["seal_again"] is True
    assert "error" in result["seal_missing"]
    assert result["delete"] is True and result["delete_missing"] is False
    assert result["streams"] == []  # the mark stream went with its stream
    assert result["delete_scope"] is True


async def test_update_scales_the_stream_the_client_sees(served: ServedProcess) -> None:
    await run_client(served.grpc_uri, SCENARIOS["update_scales_the_stream"])
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        current = await ControllerServiceStub(channel).getCurrentSegments(
            pb.StreamInfo(scope="grow", stream="s")
        )
    finally:
        channel.close()
    assert [(r.minKey, r.maxKey) for r in current.segmentRanges] == [
        (0.0, 0.25),
        (0.25, 0.5),
        (0.5, 0.75),
        (0.75, 1.0),
    ]


async def test_write_and_read_keeps_each_keys_order(served: ServedProcess) -> None:
    result = await run_client(served.grpc_uri, SCENARIOS["write_and_read"])
    assert result == {"count": 60, "distinct": 60, "per_key_in_order": True, "keys": ["0", "1", "2", "3"]}
