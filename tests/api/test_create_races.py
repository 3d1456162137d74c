"""Issue 16 defect 8 over the real surfaces: creation that always finishes. Concurrent creates of
one name give exactly one success; a create cut off after its first write (client timeout,
database connections lost) is finished by the controller's request workers, no client repeating it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from grpclib.client import Channel
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.records import ScalingPolicy, StreamConfig, StreamState
from app.services.deletion import DeleteStreamOutcome
from app.testing.controller import Services, running_controller
from tests.api.conftest import rest_api, served

CLIENTS = 50
ROUNDS = 4
TAKEOVER_S = 0.3


def _config(scope: str, stream: str, segments: int = 3) -> pb.StreamConfig:
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=segments),
    )


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _state(services: Services, scope: str, name: str) -> str | None:
    value = await services.pool.fetchval(
        "SELECT st.state FROM streams s JOIN stream_states st ON st.stream_id = s.id "
        "WHERE s.scope = $1 AND s.name = $2",
        scope,
        name,
    )
    return None if value is None else str(value)


async def _assert_finished(services: Services, scope: str, name: str, segments: int) -> None:
    """ACTIVE with its segments, its mark stream ACTIVE, and no create request left behind."""
    assert await _state(services, scope, name) == StreamState.ACTIVE.value
    assert await _state(services, scope, f"_MARK{name}") == StreamState.ACTIVE.value
    created = await services.pool.fetchval(
        "SELECT count(*) FROM embedded_segments WHERE name LIKE $1", f"{scope}/{name}/%"
    )
    assert created == segments
    left = await services.pool.fetchval(
        "SELECT count(*) FROM requests WHERE kind = 'create_stream' AND scope = $1", scope
    )
    assert left == 0


async def test_defect_8_concurrent_grpc_creates_give_one_success_and_stream_exists(
    services: Services,
) -> None:
    async with served(services) as stub:
        assert (await stub.createScope(pb.ScopeInfo(scope="race"))).status == pb.CreateScopeStatus.SUCCESS
        port = stub.createStream.channel._port  # type: ignore[attr-defined]
        channels = [Channel("127.0.0.1", port) for _ in range(CLIENTS)]
        try:
            stubs = [ControllerServiceStub(channel) for channel in channels]
            for round_ in range(ROUNDS):
                name = f"s{round_}"
                answers = await asyncio.gather(*(s.createStream(_config("race", name)) for s in stubs))
                statuses = Counter(pb.CreateStreamStatus.Status.Name(a.status) for a in answers)
                assert statuses == {"SUCCESS": 1, "STREAM_EXISTS": CLIENTS - 1}, (round_, statuses)
                await _assert_finished(services, "race", name, 3)
                current = await stub.getCurrentSegments(pb.StreamInfo(scope="race", stream=name))
                assert len(current.segmentRanges) == 3
        finally:
            for channel in channels:
                channel.close()


async def test_defect_8_concurrent_grpc_create_scope_gives_one_success_and_scope_exists(
    services: Services,
) -> None:
    async with served(services) as stub:
        port = stub.createScope.channel._port  # type: ignore[attr-defined]
        channels = [Channel("127.0.0.1", port) for _ in range(CLIENTS)]
        try:
            stubs = [ControllerServiceStub(channel) for channel in channels]
            for round_ in range(ROUNDS):
                scope = pb.ScopeInfo(scope=f"sc{round_}")
                answers = await asyncio.gather(*(s.createScope(scope) for s in stubs))
                statuses = Counter(pb.CreateScopeStatus.Status.Name(a.status) for a in answers)
                assert statuses == {"SUCCESS": 1, "SCOPE_EXISTS": CLIENTS - 1}, (round_, statuses)
        finally:
            for channel in channels:
                channel.close()


async def test_defect_8_concurrent_rest_creates_give_one_201_and_409_to_the_rest(services: Services) -> None:
    async with rest_api(services) as api:
        for round_ in range(ROUNDS):
            scope = f"rs{round_}"
            scopes = await asyncio.gather(
                *(api.call("POST", "/v1/scopes", json_body={"scopeName": scope}) for _ in range(CLIENTS))
            )
            assert Counter(status for status, _ in scopes) == {201: 1, 409: CLIENTS - 1}
            body = {"streamName": "s", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
            streams = await asyncio.gather(
                *(api.call("POST", f"/v1/scopes/{scope}/streams", json_body=body) for _ in range(CLIENTS))
            )
            assert Counter(status for status, _ in streams) == {201: 1, 409: CLIENTS - 1}
            await _assert_finished(services, scope, "s", 2)


@pytest.fixture
async def quick_takeover(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, create_takeover_s=TAKEOVER_S) as running:
        yield running


async def _segment_creation_blocked(db_url: str) -> asyncpg.Connection:
    """A connection holding a lock that makes every segment creation wait (the embedded segment
    store's table), so a create is caught after its metadata transaction, before its segments."""
    conn = await asyncpg.connect(db_url)
    await conn.execute("BEGIN")
    await conn.execute("LOCK TABLE embedded_segments IN SHARE ROW EXCLUSIVE MODE")
    return conn


async def test_defect_8_create_cut_off_by_a_client_timeout_is_finished_by_the_controller(
    db_url: str, quick_takeover: Services
) -> None:
    services = quick_takeover
    await services.scopes.create_scope("cut")
    async with served(services) as stub:
        blocker = await _segment_creation_blocked(db_url)
        try:
            with pytest.raises((GRPCError, asyncio.TimeoutError)):
                await stub.createStream(_config("cut", "s", 4), timeout=1.0)
            # The call is gone; its first write stands, waiting to be finished.
            assert await _state(services, "cut", "s") == StreamState.CREATING.value
        finally:
            await blocker.execute("ROLLBACK")
            await blocker.close()

        async def finished() -> bool:
            return await _state(services, "cut", "s") == StreamState.ACTIVE.value

        await _until(finished, "the controller finishing the cut-off create")
        await _assert_finished(services, "cut", "s", 4)
        current = await stub.getCurrentSegments(pb.StreamInfo(scope="cut", stream="s"))
        assert len(current.segmentRanges) == 4
        again = await stub.createStream(_config("cut", "s", 4))
        assert again.status == pb.CreateStreamStatus.STREAM_EXISTS


async def test_defect_8_create_cut_off_by_lost_database_connections_is_finished_by_the_controller(
    db_url: str, quick_takeover: Services
) -> None:
    services = quick_takeover
    await services.scopes.create_scope("outage")
    async with served(services) as stub:
        blocker = await _segment_creation_blocked(db_url)
        try:
            call = asyncio.create_task(stub.createStream(_config("outage", "s", 2)))

            async def caught() -> bool:
                return await _state(services, "outage", "s") == StreamState.CREATING.value

            await _until(caught, "the create's first write")
            # Every connection of the controller drops, as in a database restart.
            await blocker.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            with pytest.raises((GRPCError, StreamTerminatedError)):
                await call
        finally:
            await blocker.execute("ROLLBACK")
            await blocker.close()

        async def finished() -> bool:
            return await _state(services, "outage", "s") == StreamState.ACTIVE.value

        await _until(finished, "the controller finishing the create the outage cut off")
        await _assert_finished(services, "outage", "s", 2)


async def test_defect_8_a_stream_left_creating_can_still_be_deleted_while_the_controller_finishes_others(
    quick_takeover: Services,
) -> None:
    """Deleting a stream left CREATING (Pravega allows it) wins over finishing it, whichever of
    the two requests is filed first; the other cut-off stream is finished."""
    services = quick_takeover
    await services.scopes.create_scope("del")
    config = StreamConfig(ScalingPolicy.fixed(2))
    old = services.clock.now_ms() - 60_000  # cut off a minute ago: swept at once
    await services.stream_store.create_stream_metadata("del", "gone", config, old)
    await services.stream_store.create_stream_metadata("del", "kept", config, old)
    outcome = await services.lifecycle.deletion.delete_stream("del", "gone")
    assert outcome is DeleteStreamOutcome.SUCCESS

    async def settled() -> bool:
        return await services.pool.fetchval("SELECT count(*) FROM requests") == 0 and (
            await _state(services, "del", "kept") == StreamState.ACTIVE.value
        )

    await _until(settled, "the sweep finishing one stream and the delete removing the other")
    assert await _state(services, "del", "gone") is None
    assert (
        await services.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE 'del/gone/%'")
        == 0
    )
    await _assert_finished(services, "del", "kept", 2)
