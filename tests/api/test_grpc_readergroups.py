"""createReaderGroup, getReaderGroupConfig, updateReaderGroup and deleteReaderGroup over a
real gRPC server, with the reader-group request handlers running behind a real dispatcher:
every status Pravega answers, the decoding errors, generation conflicts between updates,
and the subscriber generation an update leaves behind (consumption-based retention)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.readergroups import ReaderGroupRpcs
from app.api.grpc.subscribers import SubscriberRpcs
from app.domain.errors import InvalidInput
from app.domain.readergroups import ReaderGroupState
from app.domain.records import ScalingPolicy, ScopeState, StreamConfig
from app.domain.requests import RequestKind
from app.store.retention import PgRetentionStore
from app.testing.controller import Services, running_controller
from tests.api.conftest import served
from tests.support.parked import parked_soon
from tests.support.readergroups import ZERO_ID, Rig, rg_config, rig, run_pending, stream_cut

SC = "rgs"
CREATE = pb.CreateReaderGroupResponse
GET = pb.ReaderGroupConfigResponse
UPDATE = pb.UpdateReaderGroupResponse
DELETE = pb.DeleteReaderGroupStatus
MANUAL, AUTOMATIC = 1, 2


@dataclass
class Api:
    stub: ControllerServiceStub
    r: Rig

    @property
    def s(self) -> Services:
        return self.r.s


async def _api(db_url: str, *, workers: bool) -> AsyncIterator[Api]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        for name in ("s1", "s2"):
            await services.streams.create_stream(SC, name, StreamConfig(ScalingPolicy.fixed(2)))
        async with rig(services, workers=workers) as r:
            rpcs = [ReaderGroupRpcs(r.service), SubscriberRpcs(r.subscribers)]
            async with served(services, extensions=rpcs) as stub:
                yield Api(stub, r)


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async for each in _api(db_url, workers=True):
        yield each


@pytest.fixture
async def idle(db_url: str) -> AsyncIterator[Api]:
    """No request is processed unless the test runs it."""
    async for each in _api(db_url, workers=False):
        yield each


def config(
    name: str = "rg", *, retention: int = 0, streams: tuple[str, ...] = ("s1",), **kw: object
) -> pb.ReaderGroupConfiguration:
    return rg_config(SC, name, [stream_cut(SC, s) for s in streams], retention=retention, **kw)  # type: ignore[arg-type]


async def create(api: Api, msg: pb.ReaderGroupConfiguration) -> pb.CreateReaderGroupResponse:
    reply: pb.CreateReaderGroupResponse = await api.stub.createReaderGroup(msg)
    assert reply.status == CREATE.SUCCESS, reply
    return reply


async def grpc_status(call: object) -> Status:
    with pytest.raises(GRPCError) as raised:
        await call  # type: ignore[misc]
    return raised.value.status


async def subscribers(api: Api, stream: str) -> list[str]:
    reply = await api.stub.listSubscribers(pb.StreamInfo(scope=SC, stream=stream))
    return list(reply.subscribers)


# --- create ---------------------------------------------------------------------------------------


async def test_create_assigns_an_id_creates_the_state_stream_and_answers_the_stored_config(api: Api) -> None:
    msg = config(streams=("s1", "s2"))
    msg.endingStreamCuts.append(stream_cut(SC, "s2", {0: 100, 1: 200}))
    msg.rolloverSizeBytes = 123
    reply = await create(api, msg)

    got = reply.config
    rg_id = uuid.UUID(got.readerGroupId)
    assert rg_id != uuid.UUID(ZERO_ID) and got.generation == 0
    expected = pb.ReaderGroupConfiguration()
    expected.CopyFrom(msg)
    expected.readerGroupId = str(rg_id)
    expected.rolloverSizeBytes = 0  # not stored
    assert got == expected
    # The state stream: one segment, 4 MiB rollover, ACTIVE, no mark stream of its own.
    listed = await api.stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=SC)))
    names = {s.stream for s in listed.streams}
    assert "_RGrg" in names and "_MARK_RGrg" not in names
    segments = await api.stub.getCurrentSegments(pb.StreamInfo(scope=SC, stream="_RGrg"))
    assert len(segments.segmentRanges) == 1
    rollover = await api.s.pool.fetchval(
        "SELECT rollover_size_bytes FROM embedded_segments WHERE name = 'rgs/_RGrg/0.#epoch.0'"
    )
    assert rollover == 4 * 1024 * 1024
    # Retention NONE: no subscriptions.
    assert await subscribers(api, "s1") == [] and await subscribers(api, "s2") == []
    fetched = await api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SC, readerGroup="rg"))
    assert fetched.status == GET.SUCCESS and fetched.config == got


async def test_create_of_an_existing_group_answers_its_own_config(api: Api) -> None:
    first = await create(api, config(retention=AUTOMATIC))
    again = await create(api, config(retention=0, streams=("s2",), rg_id=str(uuid.uuid4())))
    assert again.config == first.config
    assert await subscribers(api, "s2") == []


async def test_create_keeps_a_client_given_id(api: Api) -> None:
    chosen = str(uuid.uuid4())
    reply = await create(api, config(rg_id=chosen))
    assert reply.config.readerGroupId == chosen and reply.config.generation == 0


async def test_create_with_retention_subscribes_its_streams(api: Api) -> None:
    await create(api, config(retention=MANUAL, streams=("s1", "s2")))
    assert await subscribers(api, "s1") == [f"{SC}/rg"]
    assert await subscribers(api, "s2") == [f"{SC}/rg"]


async def test_create_invalid_name(api: Api) -> None:
    for bad in ("with_underscore", "_RGx", "a/b", "x" * 251):
        reply = await api.stub.createReaderGroup(config(bad))
        assert reply.status == CREATE.INVALID_RG_NAME, bad
    assert (await api.stub.createReaderGroup(config("x" * 250))).status == CREATE.SUCCESS


async def test_create_scope_not_found_also_while_the_scope_is_deleted(api: Api) -> None:
    missing = rg_config("nosuch", "rg", [stream_cut(SC, "s1")])
    assert (await api.stub.createReaderGroup(missing)).status == CREATE.SCOPE_NOT_FOUND
    current = await api.s.scope_store.get_scope(SC)
    await api.s.scope_store.set_scope_state(SC, ScopeState.DELETING, current.version)
    assert (await api.stub.createReaderGroup(config())).status == CREATE.SCOPE_NOT_FOUND
    assert await api.r.store.get_reader_group(SC, "rg") is None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: setattr(m, "readerGroupId", "not-a-uuid"),
        lambda m: m.ClearField("startingStreamCuts"),
        lambda m: setattr(m, "maxOutstandingCheckpointRequest", 0),
        lambda m: setattr(m, "retentionType", 3),
        lambda m: m.startingStreamCuts.append(stream_cut(SC, "s1", {0: 1})),
        lambda m: m.endingStreamCuts.append(stream_cut(SC, "s2", {0: 1})),
        lambda m: m.endingStreamCuts.append(stream_cut(SC, "s1", {0: 1})),
    ],
    ids=[
        "bad-uuid",
        "no-starting-cuts",
        "max-outstanding-0",
        "retention-3",
        "stream-twice",
        "end-not-started",
        "end-before-start",
    ],
)
async def test_undecodable_configs_are_invalid_argument_and_write_nothing(api: Api, mutate: object) -> None:
    for rpc in (api.stub.createReaderGroup, api.stub.updateReaderGroup):
        msg = config()
        msg.startingStreamCuts[0].cut[0] = 5
        mutate(msg)  # type: ignore[operator]
        assert await grpc_status(rpc(msg)) is Status.INVALID_ARGUMENT
    assert await api.r.store.list_reader_groups(SC) == []
    assert await api.s.pool.fetchval("SELECT count(*) FROM requests") == 0


async def test_create_failure_when_a_delete_overtakes_the_creation(idle: Api) -> None:
    """A create that finds the group CREATING waits for it; deleted meanwhile, it is FAILURE."""
    pending = asyncio.ensure_future(idle.stub.createReaderGroup(config()))
    for _ in range(200):
        if await idle.r.store.get_reader_group(SC, "rg") is not None:
            break
        await asyncio.sleep(0.01)
    current = await idle.r.store.get_reader_group(SC, "rg")
    assert current is not None and current.value.state is ReaderGroupState.CREATING
    await idle.r.store.delete_reader_group(SC, "rg", current.value.id, current.version)
    assert (await pending).status == CREATE.FAILURE


# --- get ------------------------------------------------------------------------------------------


async def test_get_missing_is_rg_not_found_with_a_default_config(api: Api) -> None:
    reply = await api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SC, readerGroup="none"))
    assert reply.status == GET.RG_NOT_FOUND and reply.config == pb.ReaderGroupConfiguration()
    reply = await api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope="nosuch", readerGroup="none"))
    assert reply.status == GET.RG_NOT_FOUND


async def test_empty_names_are_invalid_argument(api: Api) -> None:
    assert (
        await grpc_status(api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SC)))
        is Status.INVALID_ARGUMENT
    )
    assert await grpc_status(api.stub.deleteReaderGroup(pb.ReaderGroupInfo(readerGroup="rg"))) is (
        Status.INVALID_ARGUMENT
    )
    assert await grpc_status(api.stub.createReaderGroup(rg_config("", "rg", [stream_cut(SC, "s1")]))) is (
        Status.INVALID_ARGUMENT
    )


# --- update ---------------------------------------------------------------------------------------


async def test_update_raises_the_generation_and_replaces_the_config(api: Api) -> None:
    created = (await create(api, config())).config
    new = config(streams=("s2",), rg_id=created.readerGroupId, generation=0)
    new.groupRefreshTimeMillis = 777
    reply = await api.stub.updateReaderGroup(new)
    assert (reply.status, reply.generation) == (UPDATE.SUCCESS, 1)
    fetched = (await api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SC, readerGroup="rg"))).config
    assert fetched.generation == 1 and fetched.groupRefreshTimeMillis == 777
    assert [c.streamInfo.stream for c in fetched.startingStreamCuts] == ["s2"]
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and not stored.value.updating


async def test_update_statuses(api: Api) -> None:
    missing = await api.stub.updateReaderGroup(config("none", generation=4))
    assert (missing.status, missing.generation) == (UPDATE.RG_NOT_FOUND, 4)
    rg_id = (await create(api, config())).config.readerGroupId

    stale = await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=1))
    assert (stale.status, stale.generation) == (UPDATE.INVALID_CONFIG, 1)
    other_id = await api.stub.updateReaderGroup(config(rg_id=str(uuid.uuid4()), generation=0))
    assert other_id.status == UPDATE.INVALID_CONFIG
    default_id = await api.stub.updateReaderGroup(config(generation=0))
    assert default_id.status == UPDATE.INVALID_CONFIG

    # An update in progress (its worker has not finished): FAILURE.
    current = await api.r.store.get_reader_group(SC, "rg")
    assert current is not None
    await api.r.store.update_reader_group(dataclasses.replace(current.value, updating=True), current.version)
    busy = await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=0))
    assert (busy.status, busy.generation) == (UPDATE.FAILURE, 0)
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.generation == 0


async def test_update_of_a_stale_generation_after_an_update_is_invalid_config(api: Api) -> None:
    rg_id = (await create(api, config())).config.readerGroupId
    assert (await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=0))).status == UPDATE.SUCCESS
    again = await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=0, streams=("s2",)))
    assert again.status == UPDATE.INVALID_CONFIG
    assert (await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=1))).generation == 2


async def test_concurrent_updates_of_one_generation_one_wins(api: Api) -> None:
    rg_id = (await create(api, config())).config.readerGroupId
    replies = await asyncio.gather(
        *(
            api.stub.updateReaderGroup(config(rg_id=rg_id, generation=0, streams=(s,)))
            for s in ("s1", "s2", "s2")
        )
    )
    statuses = sorted(r.status for r in replies)
    assert statuses.count(UPDATE.SUCCESS) == 1, replies
    assert set(statuses) - {UPDATE.SUCCESS} <= {UPDATE.FAILURE, UPDATE.INVALID_CONFIG}, replies
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.generation == 1 and not stored.value.updating


async def test_a_subscriber_must_use_the_generation_of_the_last_update(api: Api) -> None:
    rg_id = (await create(api, config(retention=MANUAL))).config.readerGroupId

    def publish(generation: int, cut: dict[int, int]) -> pb.SubscriberStreamCut:
        return pb.SubscriberStreamCut(
            subscriber=f"{SC}/rg",
            readerGroupId=rg_id,
            generation=generation,
            streamCut=stream_cut(SC, "s1", cut),
        )

    ok = pb.UpdateSubscriberStatus.SUCCESS
    assert (await api.stub.updateSubscriberStreamCut(publish(0, {0: 1, 1: 1}))).status == ok
    assert (
        await api.stub.updateReaderGroup(config(retention=MANUAL, rg_id=rg_id, generation=0))
    ).generation == 1
    old = await api.stub.updateSubscriberStreamCut(publish(0, {0: 2, 1: 2}))
    assert old.status == pb.UpdateSubscriberStatus.GENERATION_MISMATCH
    assert (await api.stub.updateSubscriberStreamCut(publish(1, {0: 2, 1: 2}))).status == ok
    other = pb.SubscriberStreamCut()
    other.CopyFrom(publish(1, {0: 3, 1: 3}))
    other.readerGroupId = str(uuid.uuid4())
    assert (
        await api.stub.updateSubscriberStreamCut(other)
    ).status == pb.UpdateSubscriberStatus.SUBSCRIBER_NOT_FOUND


async def test_updates_move_subscriptions(api: Api) -> None:
    rg_id = (await create(api, config(streams=("s1", "s2")))).config.readerGroupId
    assert await subscribers(api, "s1") == []
    # NONE -> AUTOMATIC: every configured stream subscribed.
    await api.stub.updateReaderGroup(
        config(retention=AUTOMATIC, rg_id=rg_id, generation=0, streams=("s1", "s2"))
    )
    assert await subscribers(api, "s1") == [f"{SC}/rg"] and await subscribers(api, "s2") == [f"{SC}/rg"]
    # s2 dropped: unsubscribed there, s1 kept (with the new generation).
    await api.stub.updateReaderGroup(config(retention=AUTOMATIC, rg_id=rg_id, generation=1, streams=("s1",)))
    assert await subscribers(api, "s1") == [f"{SC}/rg"] and await subscribers(api, "s2") == []
    record = await PgRetentionStore(api.s.pool).get_subscriber(SC, "s1", f"{SC}/rg")
    assert record is not None and record.value.generation == 2
    # AUTOMATIC -> NONE: unsubscribed everywhere.
    await api.stub.updateReaderGroup(config(rg_id=rg_id, generation=2, streams=("s1", "s2")))
    assert await subscribers(api, "s1") == [] and await subscribers(api, "s2") == []


# --- delete ---------------------------------------------------------------------------------------


async def test_delete_removes_group_subscriptions_and_state_stream(api: Api) -> None:
    rg_id = (await create(api, config(retention=AUTOMATIC, streams=("s1", "s2")))).config.readerGroupId
    reply = await api.stub.deleteReaderGroup(
        pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId=rg_id)
    )
    assert reply.status == DELETE.SUCCESS
    assert (await api.stub.getReaderGroupConfig(pb.ReaderGroupInfo(scope=SC, readerGroup="rg"))).status == (
        GET.RG_NOT_FOUND
    )
    assert await subscribers(api, "s1") == [] and await subscribers(api, "s2") == []
    assert not (await api.stub.checkStreamExists(pb.StreamInfo(scope=SC, stream="_RGrg"))).exists
    assert (
        await api.s.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE 'rgs/_RGrg/%'") == 0
    )
    # The name is free again: a new group, a new id.
    again = await create(api, config())
    assert again.config.readerGroupId != rg_id


async def test_delete_statuses(api: Api) -> None:
    missing = await api.stub.deleteReaderGroup(
        pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId=ZERO_ID)
    )
    assert missing.status == DELETE.RG_NOT_FOUND
    # A malformed id is only looked at once the group is found (as Java does).
    garbled = await api.stub.deleteReaderGroup(
        pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId="x")
    )
    assert garbled.status == DELETE.RG_NOT_FOUND
    await create(api, config())
    other = await api.stub.deleteReaderGroup(
        pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId=str(uuid.uuid4()))
    )
    assert other.status == DELETE.RG_NOT_FOUND
    bad = api.stub.deleteReaderGroup(pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId="x"))
    assert await grpc_status(bad) is Status.INVALID_ARGUMENT
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.state is ReaderGroupState.ACTIVE


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_a_second_delete_waits_for_the_first(idle: Api) -> None:
    """The second caller finds the group DELETING, queues nothing and waits for the first's
    request; both answer SUCCESS once the worker ran."""
    creating = asyncio.ensure_future(idle.stub.createReaderGroup(config()))
    await until(lambda: _queued(idle, 1))
    assert await run_pending(idle.r) == 1
    rg_id = (await creating).config.readerGroupId
    info = pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId=rg_id)

    first = asyncio.ensure_future(idle.stub.deleteReaderGroup(info))
    await until(lambda: _queued(idle, 1))
    second = asyncio.ensure_future(idle.stub.deleteReaderGroup(info))
    await asyncio.sleep(0.3)  # the second reads the group DELETING and starts waiting
    assert await _queued(idle, 1)  # it queued no request of its own
    assert not first.done() and not second.done()
    assert await run_pending(idle.r) == 1
    assert [(await first).status, (await second).status] == [DELETE.SUCCESS, DELETE.SUCCESS]
    assert await idle.r.store.get_reader_group(SC, "rg") is None


async def _queued(api: Api, count: int) -> bool:
    return bool(await api.s.pool.fetchval("SELECT count(*) FROM requests") == count)


# --- final failures: the request parked, the group's state restored, the caller answered at once ---


async def _refused(*_args: object, **_kwargs: object) -> None:
    raise InvalidInput("injected: refused")


async def _parked_kinds(api: Api) -> list[RequestKind]:
    return [r.kind for r in await parked_soon(api.s.requests)]


async def test_defect_16_a_reader_group_create_that_fails_finally_is_failure_and_frees_the_name(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.s.segment_store, "create_segment", _refused)
    started = time.monotonic()
    reply = await api.stub.createReaderGroup(config(retention=AUTOMATIC))
    assert reply.status == CREATE.FAILURE
    assert time.monotonic() - started < 10, "answered when its request was parked, not at the deadline"
    assert await _parked_kinds(api) == [RequestKind.CREATE_READER_GROUP]
    assert await api.r.store.get_reader_group(SC, "rg") is None, "not CREATING for ever"
    assert await subscribers(api, "s1") == []
    monkeypatch.undo()
    await create(api, config())


async def test_defect_16_a_reader_group_update_that_fails_finally_is_failure_and_takes_updates_again(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg_id = (await create(api, config())).config.readerGroupId
    monkeypatch.setattr(api.r.subscribers, "add_subscriber", _refused)
    started = time.monotonic()
    reply = await api.stub.updateReaderGroup(config(retention=AUTOMATIC, rg_id=rg_id, generation=0))
    assert reply.status == UPDATE.FAILURE
    assert time.monotonic() - started < 10, "answered when its request was parked, not at the deadline"
    assert await _parked_kinds(api) == [RequestKind.UPDATE_READER_GROUP]
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and not stored.value.updating and stored.value.state is ReaderGroupState.ACTIVE
    monkeypatch.undo()
    again = await api.stub.updateReaderGroup(
        config(retention=AUTOMATIC, rg_id=rg_id, generation=stored.value.generation)
    )
    assert again.status == UPDATE.SUCCESS


async def test_defect_16_a_reader_group_delete_that_fails_finally_is_failure_and_the_group_active(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg_id = (await create(api, config())).config.readerGroupId
    info = pb.ReaderGroupInfo(scope=SC, readerGroup="rg", readerGroupId=rg_id)
    monkeypatch.setattr(api.s.segment_store, "seal_segment", _refused)
    started = time.monotonic()
    assert (await api.stub.deleteReaderGroup(info)).status == DELETE.FAILURE
    assert time.monotonic() - started < 10, "answered when its request was parked, not at the deadline"
    assert await _parked_kinds(api) == [RequestKind.DELETE_READER_GROUP]
    stored = await api.r.store.get_reader_group(SC, "rg")
    assert stored is not None and stored.value.state is ReaderGroupState.ACTIVE
    monkeypatch.undo()
    assert (await api.stub.deleteReaderGroup(info)).status == DELETE.SUCCESS
    assert await api.r.store.get_reader_group(SC, "rg") is None
