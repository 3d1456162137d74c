"""createStream and the stream queries over real gRPC, with Pravega's statuses and doubles."""

from __future__ import annotations

import itertools

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.hosts import HostAddress
from app.domain.ids import qualified_segment_name, segment_id
from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.testing.controller import Services

I64_MAX = 9223372036854775807


def config(
    scope: str,
    stream: str,
    segments: int = 1,
    *,
    scale_type: int = pb.ScalingPolicy.FIXED_NUM_SEGMENTS,
    rate: int = 0,
    factor: int = 0,
    retention: pb.RetentionPolicy | None = None,
    tags: list[str] | None = None,
) -> pb.StreamConfig:
    msg = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(
            scaleType=scale_type,
            targetRate=rate,
            scaleFactor=factor,
            minNumSegments=segments,  # type: ignore[arg-type]
        ),
    )
    if retention is not None:
        msg.retentionPolicy.CopyFrom(retention)
    if tags is not None:
        msg.tags.CopyFrom(pb.Tags(tag=tags))
    return msg


async def make_scope(stub: ControllerServiceStub, scope: str = "sc") -> None:
    assert (await stub.createScope(pb.ScopeInfo(scope=scope))).status == pb.CreateScopeStatus.SUCCESS


async def stream_count(services: Services) -> int:
    return int(await services.pool.fetchval("SELECT count(*) FROM streams"))


async def test_create_stream_statuses(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    assert (await stub.createStream(config("sc", "s1", 3))).status == pb.CreateStreamStatus.SUCCESS
    assert (await stub.createStream(config("sc", "s1", 3))).status == pb.CreateStreamStatus.STREAM_EXISTS
    missing = await stub.createStream(config("nosuch", "s1"))
    assert missing.status == pb.CreateStreamStatus.SCOPE_NOT_FOUND
    # The name check comes first: an invalid name in a missing scope is INVALID_STREAM_NAME.
    invalid = await stub.createStream(config("nosuch", "bad/name"))
    assert invalid.status == pb.CreateStreamStatus.INVALID_STREAM_NAME


@pytest.mark.parametrize(
    "bad",
    [
        config("sc", "s", 0),
        config("sc", "s", -1),
        config("sc", "s", 2, scale_type=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC, rate=0, factor=2),
        config("sc", "s", 2, scale_type=pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC, rate=10, factor=0),
        config(
            "sc",
            "s",
            1,
            retention=pb.RetentionPolicy(retentionType=pb.RetentionPolicy.SIZE, retentionParam=-5),
        ),
        config("sc", "s", 1, tags=[f"t{i}" for i in range(128)]),
        config("sc", "s", 1, tags=["x" * 256]),
    ],
)
async def test_invalid_configurations_are_rejected_and_write_nothing(
    stub: ControllerServiceStub, services: Services, bad: pb.StreamConfig
) -> None:
    await make_scope(stub)
    with pytest.raises(GRPCError) as raised:
        await stub.createStream(bad)
    assert raised.value.status == Status.INVALID_ARGUMENT
    assert await stream_count(services) == 0
    assert await services.pool.fetchval("SELECT count(*) FROM embedded_segments") == 0


async def test_tag_limits_accept_127_tags_of_255_chars(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    tags = [f"{i:03d}" + "x" * 252 for i in range(127)]
    assert (await stub.createStream(config("sc", "s", 1, tags=tags))).status == pb.CreateStreamStatus.SUCCESS
    got = await stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="s"))
    assert sorted(got.tags.tag) == sorted(tags)


@pytest.mark.parametrize(
    ("n", "index", "start", "end"),
    [
        (5, 3, 0.6000000000000001, 0.8),
        (49, 48, 48 * (1.0 / 49), 0.9999999999999999),
        (1, 0, 0.0, 1.0),
        (3, 2, 2 * (1.0 / 3), 1.0),
    ],
)
async def test_epoch_zero_uses_pravegas_exact_doubles(
    stub: ControllerServiceStub, n: int, index: int, start: float, end: float
) -> None:
    await make_scope(stub)
    await stub.createStream(config("sc", f"s{n}", n))
    ranges = (await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream=f"s{n}"))).segmentRanges
    assert len(ranges) == n
    assert [r.segmentId.segmentId for r in ranges] == [segment_id(i, 0) for i in range(n)]
    assert ranges[index].minKey == start
    assert ranges[index].maxKey == end
    assert ranges[0].minKey == 0.0
    for left, right in itertools.pairwise(ranges):
        assert left.maxKey == right.minKey


async def test_create_makes_segments_and_the_mark_stream(
    stub: ControllerServiceStub, services: Services
) -> None:
    await make_scope(stub)
    await stub.createStream(config("sc", "orders", 2, rate=0))
    names = {r["name"] for r in await services.pool.fetch("SELECT name FROM embedded_segments")}
    assert names == {
        qualified_segment_name("sc", "orders", segment_id(0, 0)),
        qualified_segment_name("sc", "orders", segment_id(1, 0)),
        qualified_segment_name("sc", "_MARKorders", segment_id(0, 0)),
    }
    assert "sc/orders/0.#epoch.0" in names
    assert (await services.streams.get_state("sc", "orders")) == StreamState.ACTIVE
    assert (await services.streams.get_state("sc", "_MARKorders")) == StreamState.ACTIVE
    mark = await services.streams.get_config("sc", "_MARKorders")
    assert mark == StreamConfig(ScalingPolicy.fixed(1))


async def test_segment_store_gets_the_scaling_policy(stub: ControllerServiceStub, services: Services) -> None:
    await make_scope(stub)
    msg = config("sc", "rated", 1, scale_type=pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC, rate=100, factor=2)
    msg.rolloverSizeBytes = 4096
    await stub.createStream(msg)
    row = await services.pool.fetchrow(
        "SELECT scale_type, target_rate, rollover_size_bytes FROM embedded_segments WHERE name = $1",
        "sc/rated/0.#epoch.0",
    )
    assert tuple(row) == (1, 100, 4096)


async def test_configuration_round_trip(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    sent = config(
        "sc",
        "full",
        4,
        scale_type=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
        rate=50,
        factor=3,
        retention=pb.RetentionPolicy(
            retentionType=pb.RetentionPolicy.TIME, retentionParam=60000, retentionMax=I64_MAX
        ),
        tags=["b", "a", "b"],
    )
    sent.timestampAggregationTimeout = 1234
    sent.rolloverSizeBytes = 1 << 20
    await stub.createStream(sent)
    got = await stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="full"))
    assert got.streamInfo.scope == "sc" and got.streamInfo.stream == "full"
    assert got.scalingPolicy == sent.scalingPolicy
    assert got.retentionPolicy == sent.retentionPolicy
    assert sorted(got.tags.tag) == ["a", "b"]
    assert got.timestampAggregationTimeout == 1234
    assert got.rolloverSizeBytes == 1 << 20


async def test_configuration_without_retention_or_tags(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    await stub.createStream(config("sc", "plain", 1, retention=pb.RetentionPolicy()))
    got = await stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="plain"))
    assert not got.HasField("retentionPolicy")
    assert got.HasField("tags") and list(got.tags.tag) == []
    assert got.HasField("scalingPolicy")


async def test_unknown_stream_is_not_found(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    for call in (
        stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="nope")),
        stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="nope")),
        stub.getSegments(pb.GetSegmentsRequest(streamInfo=pb.StreamInfo(scope="sc", stream="nope"))),
        stub.isSegmentValid(pb.SegmentId(streamInfo=pb.StreamInfo(scope="sc", stream="nope"), segmentId=0)),
        stub.getEpochSegments(
            pb.GetEpochSegmentsRequest(streamInfo=pb.StreamInfo(scope="sc", stream="nope"))
        ),
    ):
        with pytest.raises(GRPCError) as raised:
            await call
        assert raised.value.status == Status.NOT_FOUND
    exists = await stub.checkStreamExists(pb.StreamInfo(scope="sc", stream="nope"))
    assert not exists.exists


async def test_list_streams_includes_internal_streams_and_pages(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    for name in ("a", "b", "c"):
        await stub.createStream(config("sc", name))
    listed = await stub.listStreamsInScope(
        pb.StreamsInScopeRequest(
            scope=pb.ScopeInfo(scope="sc"), continuationToken=pb.ContinuationToken(token="")
        )
    )
    assert listed.status == pb.StreamsInScopeResponse.SUCCESS
    assert sorted(s.stream for s in listed.streams) == ["_MARKa", "_MARKb", "_MARKc", "a", "b", "c"]
    assert all(s.scope == "sc" for s in listed.streams)
    end = await stub.listStreamsInScope(
        pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="sc"), continuationToken=listed.continuationToken)
    )
    assert list(end.streams) == [] and end.continuationToken == listed.continuationToken
    missing = await stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="nope")))
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND


async def test_list_streams_for_tag(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    await stub.createStream(config("sc", "red1", tags=["red"]))
    await stub.createStream(config("sc", "red2", tags=["red", "blue"]))
    await stub.createStream(config("sc", "blue", tags=["blue"]))
    await stub.createStream(config("sc", "_hidden", tags=["red"]))

    async def tagged(tag: str) -> list[str]:
        response = await stub.listStreamsInScopeForTag(
            pb.StreamsInScopeWithTagRequest(scope=pb.ScopeInfo(scope="sc"), tag=tag)
        )
        assert response.status == pb.StreamsInScopeResponse.SUCCESS
        return sorted(s.stream for s in response.streams)

    assert await tagged("red") == ["red1", "red2"]
    assert await tagged("blue") == ["blue", "red2"]
    assert await tagged("green") == []
    missing = await stub.listStreamsInScopeForTag(
        pb.StreamsInScopeWithTagRequest(scope=pb.ScopeInfo(scope="nope"), tag="red")
    )
    assert missing.status == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND


async def test_epoch_segments_head_and_validity(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    await stub.createStream(config("sc", "s", 3))
    info = pb.StreamInfo(scope="sc", stream="s")
    epoch0 = await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info, epoch=0))
    current = await stub.getCurrentSegments(info)
    assert list(epoch0.segmentRanges) == list(current.segmentRanges)
    with pytest.raises(GRPCError) as raised:
        await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info, epoch=1))
    assert raised.value.status == Status.NOT_FOUND
    with pytest.raises(GRPCError) as negative:
        await stub.getEpochSegments(pb.GetEpochSegmentsRequest(streamInfo=info, epoch=-1))
    assert negative.value.status == Status.INVALID_ARGUMENT
    head = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=info, timestamp=123))
    assert {(loc.segmentId.segmentId, loc.offset) for loc in head.segments} == {(0, 0), (1, 0), (2, 0)}
    assert (await stub.isSegmentValid(pb.SegmentId(streamInfo=info, segmentId=2))).response
    assert not (await stub.isSegmentValid(pb.SegmentId(streamInfo=info, segmentId=3))).response
    assert not (await stub.isSegmentValid(pb.SegmentId(streamInfo=info, segmentId=segment_id(2, 1)))).response


async def test_stream_in_creating_is_a_failed_precondition_for_segment_reads(
    stub: ControllerServiceStub, services: Services
) -> None:
    await make_scope(stub)
    # Created now: a stream left CREATING for --create-takeover-s is finished by the controller.
    now = services.clock.now_ms()
    await services.stream_store.create_stream_metadata(
        "sc", "half", StreamConfig(ScalingPolicy.fixed(1)), now
    )
    assert (await stub.checkStreamExists(pb.StreamInfo(scope="sc", stream="half"))).exists
    with pytest.raises(GRPCError) as raised:
        await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="half"))
    assert raised.value.status == Status.FAILED_PRECONDITION


async def test_create_completes_a_stream_left_in_creating(
    stub: ControllerServiceStub, services: Services
) -> None:
    """A crash after the metadata transaction leaves CREATING; the next create finishes it with
    the stored configuration and reports STREAM_EXISTS (its timestamp differs)."""
    await make_scope(stub)
    await services.stream_store.create_stream_metadata("sc", "half", StreamConfig(ScalingPolicy.fixed(2)), 5)
    response = await stub.createStream(config("sc", "half", 7))
    assert response.status == pb.CreateStreamStatus.STREAM_EXISTS
    assert await services.streams.get_state("sc", "half") == StreamState.ACTIVE
    current = await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="half"))
    assert len(current.segmentRanges) == 2
    count = await services.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE 'sc/half/%'")
    assert count == 2


async def test_recreated_stream_numbers_after_the_deleted_one(
    stub: ControllerServiceStub, services: Services
) -> None:
    await make_scope(stub)
    await services.stream_store.put_deleted_stream("sc", "again", 2, None)
    await stub.createStream(config("sc", "again", 3))
    current = await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="again"))
    assert [r.segmentId.segmentId for r in current.segmentRanges] == [3, 4, 5]


async def test_get_uri_follows_the_container_map_without_existence_checks(
    stub: ControllerServiceStub, services: Services
) -> None:
    for stream, number in (("s", 0), ("s", 7), ("rg_kvtable", 0), ("other", 123456)):
        uri = await stub.getURI(
            pb.SegmentId(streamInfo=pb.StreamInfo(scope="anything", stream=stream), segmentId=number)
        )
        expected = services.locator.endpoint_for_segment(f"anything/{stream}/{number}.#epoch.0")
        assert HostAddress(uri.endpoint, uri.port) == expected
    seen = set()
    for number in range(64):
        uri = await stub.getURI(
            pb.SegmentId(streamInfo=pb.StreamInfo(scope="a", stream="b"), segmentId=number)
        )
        seen.add(HostAddress(uri.endpoint, uri.port))
    # One embedded segment store owns every container, and getURI names its bound address.
    assert len(seen) == 1 and seen == {services.locator.endpoint_for_segment("a/b/0.#epoch.0")}
    assert next(iter(seen)).port != 12345, "the harness binds the embedded store to a free port"


async def test_server_list_delegation_token_and_unimplemented(stub: ControllerServiceStub) -> None:
    servers = await stub.getControllerServerList(pb.ServerRequest())
    assert [(n.endpoint, n.port) for n in servers.nodeURI] == [("127.0.0.1", 9090)]
    token = await stub.getDelegationToken(pb.StreamInfo(scope="sc", stream="s"))
    assert token.delegationToken == ""
    with pytest.raises(GRPCError) as raised:
        await stub.listSubscribers(pb.StreamInfo(scope="sc", stream="s"))
    assert raised.value.status == Status.UNIMPLEMENTED
