"""Hot read replies served from cached bytes (app/api/grpc/reply_cache.py) over real gRPC: warm
calls reuse the bytes, and every committed change is answered as an uncached call would answer
it, whether made through this controller or behind its back (direct SQL, its trigger's NOTIFY)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from app.api.grpc.preencoded import PreEncoded, encode_reply
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.reply_cache import ReplyCache, with_token
from app.domain.hosts import HostAddress
from app.domain.records import SegmentRecord
from app.metrics.registry import counter
from app.testing.controller import Services
from tests.api.test_grpc_lifecycle import scale_request, seg, stream_with, wait_scaled

S = pb.StreamInfo(scope="sc", stream="s")
_REPLY = counter("pgcontroller_cache_requests")


def hits() -> float:
    return float(_REPLY.labels("reply", "hit")._value.get())


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "the change was never answered"
        await asyncio.sleep(0.01)


async def current(stub: ControllerServiceStub) -> list[tuple[int, float, float]]:
    ranges = await stub.getCurrentSegments(S)
    return [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges.segmentRanges]


async def head(stub: ControllerServiceStub) -> list[tuple[int, int]]:
    answer = await stub.getSegments(pb.GetSegmentsRequest(streamInfo=S))
    return [(location.segmentId.segmentId, location.offset) for location in answer.segments]


async def stream_id(services: Services) -> int:
    return int(await services.pool.fetchval("SELECT id FROM streams WHERE scope = 'sc' AND name = 's'"))


async def test_warm_calls_reuse_the_bytes_and_a_scale_is_answered_at_once(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    first = await current(stub)
    before = hits()
    for _ in range(3):
        assert await current(stub) == first
    assert hits() - before >= 3
    response = await stub.scale(scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)]))
    assert response.status == pb.ScaleResponse.STARTED
    await wait_scaled(stub, 0)
    assert await current(stub) == [(seg(0), 0.0, 0.5), (seg(2, 1), 0.5, 0.75), (seg(3, 1), 0.75, 1.0)]


async def test_a_seal_committed_behind_the_controllers_back_is_answered(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    assert len(await current(stub)) == 2  # cached now
    # Another writer's commit: the trigger's NOTIFY is all this controller hears of it.
    await services.pool.execute(
        "UPDATE stream_states SET state = 'SEALED', version = version + 1 WHERE stream_id = $1",
        await stream_id(services),
    )

    async def sealed() -> bool:
        return await current(stub) == []

    await eventually(sealed)


async def test_a_stream_deleted_and_created_again_under_its_name_answers_the_new_one(
    stub: ControllerServiceStub,
) -> None:
    await stream_with(stub, 2)
    assert [number for number, _, _ in await current(stub)] == [seg(0), seg(1)]
    assert (await stub.sealStream(S)).status == pb.UpdateStreamStatus.SUCCESS
    assert (await stub.deleteStream(S)).status == pb.DeleteStreamStatus.SUCCESS
    created = await stub.createStream(
        pb.StreamConfig(streamInfo=S, scalingPolicy=pb.ScalingPolicy(minNumSegments=2))
    )
    assert created.status == pb.CreateStreamStatus.SUCCESS
    # Segment numbers go on from the deleted stream's: the same shape, other segments.
    assert [number for number, _, _ in await current(stub)] == [seg(2), seg(3)]


async def test_a_truncation_and_a_configuration_written_elsewhere_are_answered(
    stub: ControllerServiceStub, services: Services
) -> None:
    await stream_with(stub, 2)
    assert await head(stub) == [(seg(0), 0), (seg(1), 0)]
    config = await stub.getStreamConfiguration(S)
    assert config.rolloverSizeBytes == 0
    sid = await stream_id(services)
    await services.pool.execute(
        "UPDATE stream_truncations SET stream_cut = $2::jsonb, version = version + 1 WHERE stream_id = $1",
        sid,
        {str(seg(0)): 5, str(seg(1)): 7},  # the pool encodes jsonb
    )
    await services.pool.execute(
        "UPDATE stream_configs SET rollover_size_bytes = 4096, version = version + 1 WHERE stream_id = $1",
        sid,
    )
    assert await head(stub) == [(seg(0), 5), (seg(1), 7)]
    assert (await stub.getStreamConfiguration(S)).rolloverSizeBytes == 4096


async def test_get_uri_answers_from_bytes(stub: ControllerServiceStub, services: Services) -> None:
    await stream_with(stub, 1)
    for _ in range(2):
        uri = await stub.getURI(pb.SegmentId(streamInfo=S, segmentId=seg(0)))
        assert HostAddress(uri.endpoint, uri.port) == services.segments.uri("sc", "s", seg(0))


# --- the bytes themselves -------------------------------------------------------------------------


async def test_cached_bytes_with_a_token_are_the_message_an_uncached_call_builds() -> None:
    cache = ReplyCache()
    segments = (SegmentRecord(0, 0, 10, 0.0, 0.5), SegmentRecord(1, 0, 10, 0.5, 1.0))
    body = await cache.segment_ranges("sc", "s", segments)
    assert await cache.segment_ranges("sc", "s", segments) is body
    reply = with_token(body, pb.SegmentRanges, "a-token")
    expected = pb.SegmentRanges(delegationToken="a-token")
    for segment in segments:
        added = expected.segmentRanges.add(minKey=segment.key_start, maxKey=segment.key_end)
        added.segmentId.streamInfo.CopyFrom(pb.StreamInfo(scope="sc", stream="s"))
        added.segmentId.segmentId = segment.id
    assert reply.decoded() == expected
    # Other segments under the same name: other bytes, not the cached ones.
    moved = (SegmentRecord(2, 1, 20, 0.0, 1.0),)
    assert pb.SegmentRanges.FromString(await cache.segment_ranges("sc", "s", moved)).segmentRanges[
        0
    ].segmentId.segmentId == seg(2, 1)


def test_the_cache_is_bounded_by_entries_and_weight() -> None:
    cache = ReplyCache(max_entries=2, max_weight=3)
    for name in ("a", "b", "c"):
        cache.node_uri(name, 1)
    assert len(cache) == 2
    cache.segments_at_head("sc", "big", {1: 0, 2: 0, 3: 0, 4: 0})  # heavier than the whole cache
    assert len(cache) == 2


def test_a_pre_encoded_reply_of_another_type_is_refused() -> None:
    assert encode_reply(PreEncoded(b"", pb.NodeUri), pb.NodeUri) == b""
    assert encode_reply(pb.NodeUri(), pb.NodeUri) is None
    with pytest.raises(TypeError):
        encode_reply(PreEncoded(b"", pb.NodeUri), pb.SegmentRanges)


async def test_a_create_transaction_answer_is_its_own_id_the_cached_segments_and_its_token() -> None:
    cache = ReplyCache()
    segments = (SegmentRecord(4, 2, 10, 0.0, 1.0),)
    for low in (1, 2):
        txn_id = pb.CreateTxnResponse(txnId=pb.TxnId(highBits=2 << 32, lowBits=low)).SerializeToString()
        body = await cache.active_segments("sc", "s", segments)
        decoded = with_token(txn_id + body, pb.CreateTxnResponse, f"token-{low}").decoded()
        assert isinstance(decoded, pb.CreateTxnResponse)
        assert (decoded.txnId.lowBits, decoded.delegationToken) == (low, f"token-{low}")
        assert [r.segmentId.segmentId for r in decoded.activeSegments] == [seg(4, 2)]
