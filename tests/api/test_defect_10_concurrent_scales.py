"""Issue 16, defect 10: identical scales sent at once got one STARTED and FAILURE for the others.
A client retrying a timed-out scale deserves the idempotent answer, as a repeat while the scale
is still pending gets: STARTED with the same segments and epoch."""

from __future__ import annotations

import asyncio

from app.api.grpc.proto import controller_pb2 as pb
from tests.api.test_defect_3_seal_races import accepting_only
from tests.api.test_grpc_lifecycle import scale_request, seg, stream_with
from tests.api.test_grpc_streams import config


def answer(response: pb.ScaleResponse) -> tuple[int, int, list[tuple[int, float, float]]]:
    return (
        response.status,
        response.epoch,
        [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in response.segments],
    )


async def test_defect_10_identical_scales_at_once_all_get_started_with_the_same_segments(db_url: str) -> None:
    # No workers: the scale stays pending, so every answer is judged against the same transition.
    async with accepting_only(db_url) as (idle, stub):
        for n in range(3):
            info = pb.StreamInfo(scope="sc", stream=f"s{n}")
            if n == 0:
                await stream_with(stub, 2, info)
            else:
                created = await stub.createStream(config("sc", info.stream, 2))
                assert created.status == pb.CreateStreamStatus.SUCCESS
            request = scale_request([seg(1)], [(0.5, 0.75), (0.75, 1.0)], info)
            answers = await asyncio.gather(*(stub.scale(request) for _ in range(4)))
            expected = (pb.ScaleResponse.STARTED, 0, [(seg(2, 1), 0.5, 0.75), (seg(3, 1), 0.75, 1.0)])
            assert [answer(a) for a in answers] == [expected] * 4
            # The sequential repeat answers the same, and one request runs the scale.
            assert answer(await stub.scale(request)) == expected
            count = await idle.pool.fetchval(
                "SELECT count(*) FROM requests WHERE kind = 'scale' AND stream = $1", info.stream
            )
            assert count == 1
