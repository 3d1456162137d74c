"""Issue 16 defect 8 in the store: which streams left CREATING get a create request filed, and
the create lost to a concurrent one reads the winner's stream instead of failing."""

from __future__ import annotations

import asyncio

from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.domain.requests import NewRequest, Request, RequestKind, request_bucket
from app.store.cluster import PgClusterStore
from app.testing.controller import Services, idle_controller
from workers.handlers.create_stream import CreateStreamHandler

CONFIG = StreamConfig(ScalingPolicy.fixed(2))


async def _filed(services: Services) -> list[tuple[str, str, int]]:
    rows = await services.pool.fetch(
        "SELECT scope, stream, (payload->>'creation_time')::bigint AS t FROM requests "
        "WHERE kind = 'create_stream' ORDER BY scope, stream"
    )
    return [(r["scope"], r["stream"], r["t"]) for r in rows]


async def test_defect_8_a_create_request_is_filed_once_for_an_old_user_stream_in_creating(
    db_url: str,
) -> None:
    async with idle_controller(db_url, "sc") as services:
        store = services.stream_store
        await store.create_stream_metadata("sc", "old", CONFIG, 1_000)
        await store.create_stream_metadata("sc", "young", CONFIG, 9_000)
        await store.create_stream_metadata("sc", "_MARKold", CONFIG, 1_000)  # finished by its stream
        await store.create_stream_metadata("sc", "_RGgroup", CONFIG, 1_000)  # by its group's request
        await store.create_stream_metadata("sc", "_own", CONFIG, 1_000)  # a user may lead with "_"
        await services.streams.create_stream("sc", "done", CONFIG, creation_time=1_000)  # ACTIVE
        count = (await PgClusterStore(services.pool).get_settings()).counts.requests
        buckets = list(range(count))

        assert await store.file_creation_finishers(5_000, buckets, 10_000) == 2
        assert await _filed(services) == [("sc", "_own", 1_000), ("sc", "old", 1_000)]
        assert await store.file_creation_finishers(5_000, buckets, 10_000) == 0, "filed once"

        # Only the buckets this process owns are swept.
        bucket = request_bucket("sc", "young", count)
        others = [b for b in buckets if b != bucket]
        assert await store.file_creation_finishers(10_000, others, 11_000) == 0
        assert await store.file_creation_finishers(10_000, [bucket], 11_000) == 1
        assert await _filed(services) == [("sc", "_own", 1_000), ("sc", "old", 1_000), ("sc", "young", 9_000)]


async def test_defect_8_creates_racing_for_one_name_all_read_the_same_stream(db_url: str) -> None:
    async with idle_controller(db_url, "sc") as services:
        store = services.stream_store
        for round_ in range(5):
            name = f"s{round_}"
            creations = await asyncio.gather(
                *(store.create_stream_metadata("sc", name, CONFIG, 100 + i) for i in range(20))
            )
            assert sum(c.created for c in creations) == 1
            assert {c.creation_time for c in creations} == {
                next(c for c in creations if c.created).creation_time
            }
            assert all(c.state is StreamState.CREATING for c in creations)


async def _create_request(services: Services, name: str, creation_time: int) -> Request:
    await services.stream_store.file_creation_finishers(creation_time + 1, list(range(1024)), creation_time)
    rows = await services.requests.list_requests(0, 100)
    return next(r for r in rows if r.kind is RequestKind.CREATE_STREAM and r.stream == name)


async def _nothing() -> None:
    return None


async def test_defect_8_the_create_request_finishes_the_stream_unless_a_delete_is_queued(db_url: str) -> None:
    async with idle_controller(db_url, "sc") as services:
        handler = CreateStreamHandler(services.streams, services.stream_store, services.requests)
        await services.stream_store.create_stream_metadata("sc", "fin", CONFIG, 1_000)
        await services.stream_store.create_stream_metadata("sc", "del", CONFIG, 1_000)
        finish = await _create_request(services, "fin", 1_000)
        keep = await _create_request(services, "del", 1_000)
        await services.requests.enqueue(
            NewRequest(RequestKind.DELETE_STREAM, "sc", "del", 2_000, payload={"creation_time": 1_000})
        )

        await handler.handle(finish, _nothing)
        await handler.handle(keep, _nothing)

        assert await services.streams.get_state("sc", "fin") is StreamState.ACTIVE
        assert await services.streams.get_state("sc", "_MARKfin") is StreamState.ACTIVE
        assert await services.streams.get_state("sc", "del") is StreamState.CREATING, "left to the delete"
        await handler.handle(finish, _nothing)  # again: nothing left to do
        assert await services.streams.get_state("sc", "fin") is StreamState.ACTIVE
