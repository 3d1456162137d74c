"""listStreamsInScopeForTag past one page, and the tag index under concurrent tag-only updates:
every carrier listed exactly once, pages of at most 1,000, and the end page echoing its token."""

from __future__ import annotations

import asyncio

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from tests.api.test_grpc_streams import config, make_scope

PAGE_LIMIT = 1000


async def create_all(stub: ControllerServiceStub, configs: list[pb.StreamConfig]) -> None:
    pending = list(configs)

    async def worker() -> None:
        while pending:
            status = await stub.createStream(pending.pop())
            assert status.status == pb.CreateStreamStatus.SUCCESS

    await asyncio.gather(*(worker() for _ in range(8)))


async def tag_page(stub: ControllerServiceStub, tag: str, token: str) -> pb.StreamsInScopeResponse:
    return await stub.listStreamsInScopeForTag(
        pb.StreamsInScopeWithTagRequest(
            scope=pb.ScopeInfo(scope="sc"), tag=tag, continuationToken=pb.ContinuationToken(token=token)
        )
    )


async def test_a_tag_on_more_streams_than_a_page_lists_each_once(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    carriers = [f"s{i:04d}" for i in range(PAGE_LIMIT + 25)]
    await create_all(
        stub,
        [config("sc", name, tags=["many", f"own-{name}"]) for name in carriers]
        + [config("sc", f"other{i}", tags=["few"]) for i in range(30)],
    )
    first = await tag_page(stub, "many", "")
    assert len(first.streams) == PAGE_LIMIT and first.continuationToken.token
    second = await tag_page(stub, "many", first.continuationToken.token)
    assert len(second.streams) == 25
    end = await tag_page(stub, "many", second.continuationToken.token)
    assert list(end.streams) == [] and end.continuationToken.token == second.continuationToken.token
    listed = [s.stream for s in (*first.streams, *second.streams)]
    assert sorted(listed) == carriers
    own = await tag_page(stub, "own-s0500", "")
    assert [s.stream for s in own.streams] == ["s0500"]


async def test_tag_only_updates_during_a_listing_never_duplicate(stub: ControllerServiceStub) -> None:
    await make_scope(stub)
    names = [f"s{i:04d}" for i in range(PAGE_LIMIT + 10)]
    await create_all(stub, [config("sc", name, tags=["moving"]) for name in names])
    first = await tag_page(stub, "moving", "")
    seen = [s.stream for s in first.streams]
    # Drop the tag from one stream already listed and one not yet listed; re-add it to a third.
    untag_listed, untag_ahead = seen[0], names[-1]
    for name, tags in ((untag_listed, ["still"]), (untag_ahead, ["still"])):
        updated = await stub.updateStream(config("sc", name, tags=tags))
        assert updated.status == pb.UpdateStreamStatus.SUCCESS
    rest = await tag_page(stub, "moving", first.continuationToken.token)
    listed = seen + [s.stream for s in rest.streams]
    assert len(listed) == len(set(listed))
    assert untag_ahead not in listed
    assert set(names) - set(listed) == {untag_ahead}
    now = await tag_page(stub, "still", "")
    assert sorted(s.stream for s in now.streams) == sorted([untag_listed, untag_ahead])
