"""The key-value table RPCs over real gRPC: every status of create, delete,
configuration and listing, segments of a table, and the gRPC errors for bad input.

The table handlers are not wired into the controller's own runner here, so the fixture runs a
RequestDispatcher over them; it owns a settable set of request buckets, which lets a test hold
the workers back (and see a table in CREATING) and let them go again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.kvtables import KvtRpcs
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.cluster import DEFAULT_COUNTS
from app.domain.errors import InvalidInput
from app.domain.ids import segment_id
from app.domain.kvtables import KvtState
from app.domain.records import ScopeState
from app.domain.requests import RequestKind
from app.services.kvtables import KvtService
from app.services.paging import decode_token, encode_token
from app.store.kvtables import PgKvtStore
from app.store.pool import create_pool
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from tests.api.conftest import served
from tests.support.parked import parked_soon
from workers.dispatcher import RequestDispatcher
from workers.handlers.common import WorkflowDeps
from workers.handlers.kvtables import kvt_handlers
from workers.runner import RequestRunner

SC = "kvapi"
ALL_BUCKETS = frozenset(range(DEFAULT_COUNTS.requests))


@dataclass
class Api:
    services: Services
    stub: ControllerServiceStub
    kvts: PgKvtStore
    owned: set[int]

    def hold_workers(self) -> None:
        self.owned.clear()

    def release_workers(self) -> None:
        self.owned.update(ALL_BUCKETS)


@contextlib.asynccontextmanager
async def kvt_api(db_url: str, completion_timeout_s: float = 30.0) -> AsyncIterator[Api]:
    async with running_controller(db_url, workers=False) as services:
        kvts = PgKvtStore(services.pool)
        deps = WorkflowDeps(
            services.stream_store,
            services.scope_store,
            services.segment_store,
            services.clock,
            services.txn_store,
        )
        owned = set(ALL_BUCKETS)
        # The runner checks ownership too: a request the dispatcher read just before a hold is
        # then left alone, not run.
        runner = RequestRunner(
            services.requests,
            kvt_handlers(deps, kvts),
            services.clock,
            owns=lambda bucket: bucket in owned,
            max_failures=TEST_SETTINGS.request_max_failures,
        )
        dispatcher = RequestDispatcher(
            services.requests,
            runner,
            lambda: frozenset(owned),
            ceiling=TEST_SETTINGS.request_concurrency,
            poll_s=0.02,
        )
        task = asyncio.create_task(dispatcher.run())
        service = KvtService(
            kvts, services.clock, services.requests, completion_timeout_s=completion_timeout_s
        )
        try:
            async with served(services, extensions=[KvtRpcs(service)]) as stub:
                await stub.createScope(pb.ScopeInfo(scope=SC))
                yield Api(services, stub, kvts, owned)
        finally:
            await dispatcher.stop(5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.fixture
async def api(db_url: str) -> AsyncIterator[Api]:
    async with kvt_api(db_url) as running:
        yield running


def config(
    name: str = "t",
    partitions: int = 3,
    primary: int = 8,
    secondary: int = 4,
    rollover: int = 1024,
    scope: str = SC,
) -> pb.KeyValueTableConfig:
    return pb.KeyValueTableConfig(
        scope=scope,
        kvtName=name,
        partitionCount=partitions,
        primaryKeyLength=primary,
        secondaryKeyLength=secondary,
        rolloverSizeBytes=rollover,
    )


def info(name: str = "t", scope: str = SC) -> pb.KeyValueTableInfo:
    return pb.KeyValueTableInfo(scope=scope, kvtName=name)


async def create(api: Api, request: pb.KeyValueTableConfig) -> int:
    return int((await api.stub.createKeyValueTable(request)).status)


async def table_segment_names(api: Api) -> list[str]:
    rows = await api.services.pool.fetch(
        "SELECT name FROM embedded_segments WHERE kind = 'table' ORDER BY name"
    )
    return [r["name"] for r in rows]


async def wait_for_row(api: Api, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not await api.services.pool.fetchval("SELECT count(*) FROM kvtables WHERE name = $1", name):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


# --- create, segments, configuration, delete: the whole life of a table --------------------------


async def test_a_table_is_created_read_listed_and_deleted(api: Api) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS

    segments = await api.stub.getCurrentSegmentsKeyValueTable(info())
    third = 1.0 / 3
    assert [
        (r.segmentId.streamInfo.scope, r.segmentId.streamInfo.stream) for r in segments.segmentRanges
    ] == [(SC, "t")] * 3
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in segments.segmentRanges] == [
        (segment_id(0, 0), 0.0, third),
        (segment_id(1, 0), third, 2 * third),
        (segment_id(2, 0), 2 * third, 3 * third),
    ]
    assert segments.delegationToken == ""
    assert await table_segment_names(api) == [f"{SC}/t_kvtable/{n}.#epoch.0" for n in range(3)]

    got = await api.stub.getKeyValueTableConfiguration(info())
    assert got.status == pb.KeyValueTableConfigResponse.SUCCESS
    assert got.config == config()

    listed = await api.stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SC)))
    assert listed.status == pb.KVTablesInScopeResponse.SUCCESS
    assert list(listed.kvtables) == [info()]

    deleted = await api.stub.deleteKeyValueTable(info())
    assert deleted.status == pb.DeleteKVTableStatus.SUCCESS
    assert await table_segment_names(api) == []
    assert await api.services.pool.fetchval("SELECT count(*) FROM requests") == 0


async def test_a_recreated_table_gets_fresh_segment_numbers(api: Api) -> None:
    assert await create(api, config(partitions=2)) == pb.CreateKeyValueTableStatus.SUCCESS
    assert (await api.stub.deleteKeyValueTable(info())).status == pb.DeleteKVTableStatus.SUCCESS
    assert await create(api, config(partitions=2)) == pb.CreateKeyValueTableStatus.SUCCESS
    segments = await api.stub.getCurrentSegmentsKeyValueTable(info())
    assert [r.segmentId.segmentId for r in segments.segmentRanges] == [segment_id(2, 0), segment_id(3, 0)]
    assert [r.minKey for r in segments.segmentRanges] == [0.0, 0.5]


# --- createKeyValueTable statuses ------------------------------------------------------------------


async def test_a_second_create_is_table_exists_whatever_its_config(api: Api) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.TABLE_EXISTS
    assert await create(api, config(partitions=7)) == pb.CreateKeyValueTableStatus.TABLE_EXISTS
    assert (await api.stub.getKeyValueTableConfiguration(info())).config.partitionCount == 3


async def test_concurrent_creates_give_one_success(api: Api) -> None:
    outcomes = await asyncio.gather(*(create(api, config()) for _ in range(4)))
    assert (
        sorted(outcomes)
        == [pb.CreateKeyValueTableStatus.SUCCESS] + [pb.CreateKeyValueTableStatus.TABLE_EXISTS] * 3
    )
    assert len(await table_segment_names(api)) == 3


async def test_create_in_a_missing_scope_is_scope_not_found(api: Api) -> None:
    assert await create(api, config(scope="nope")) == pb.CreateKeyValueTableStatus.SCOPE_NOT_FOUND


async def test_create_in_a_scope_being_deleted_is_scope_not_found(api: Api) -> None:
    version = (await api.services.scope_store.get_scope(SC)).version
    await api.services.scope_store.set_scope_state(SC, ScopeState.DELETING, version)
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SCOPE_NOT_FOUND
    assert await api.services.pool.fetchval("SELECT count(*) FROM kvtables") == 0


@pytest.mark.parametrize("name", ["", "a_b", "a/b", "_t", "x" * 251, "tab le"])
async def test_an_invalid_name_is_invalid_table_name(api: Api, name: str) -> None:
    assert await create(api, config(name=name)) == pb.CreateKeyValueTableStatus.INVALID_TABLE_NAME
    assert await api.services.pool.fetchval("SELECT count(*) FROM kvtables") == 0


async def test_the_longest_valid_name_is_accepted(api: Api) -> None:
    name = "a.-Z9" * 50  # 250 characters
    assert await create(api, config(name=name)) == pb.CreateKeyValueTableStatus.SUCCESS


@pytest.mark.parametrize(
    "bad",
    [
        config(partitions=0),
        config(partitions=-1),
        config(primary=0),
        config(secondary=-1),
        config(rollover=-1),
        config(primary=200, secondary=57),
        # The config is checked before the name, as in Java.
        config(name="a_b", partitions=0),
    ],
    ids=[
        "no-partitions",
        "negative-partitions",
        "no-primary-key",
        "negative-secondary",
        "negative-rollover",
        "key-too-long",
        "bad-config-and-name",
    ],
)
async def test_a_bad_configuration_is_invalid_argument(api: Api, bad: pb.KeyValueTableConfig) -> None:
    with pytest.raises(GRPCError) as raised:
        await api.stub.createKeyValueTable(bad)
    assert raised.value.status == Status.INVALID_ARGUMENT
    assert await api.services.pool.fetchval("SELECT count(*) FROM kvtables") == 0


async def test_the_longest_total_key_is_accepted(api: Api) -> None:
    assert await create(api, config(primary=200, secondary=56)) == pb.CreateKeyValueTableStatus.SUCCESS


async def test_create_while_the_table_is_being_deleted_is_table_exists(api: Api) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS
    api.hold_workers()
    current = await api.kvts.get_kvt(SC, "t")
    await api.kvts.set_kvt_state(SC, "t", current.value.id, KvtState.DELETING, current.version)
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.TABLE_EXISTS


async def test_create_of_a_table_deleted_before_it_was_ready_is_failure(api: Api) -> None:
    api.hold_workers()
    call = asyncio.create_task(create(api, config()))
    await wait_for_row(api, "t")
    current = await api.kvts.get_kvt(SC, "t")
    version = await api.kvts.set_kvt_state(SC, "t", current.value.id, KvtState.DELETING, current.version)
    assert await api.kvts.delete_kvt(SC, "t", current.value.id, version)

    assert await call == pb.CreateKeyValueTableStatus.FAILURE
    api.release_workers()  # the create request then finds nothing to do
    deadline = asyncio.get_running_loop().time() + 10
    while await api.services.pool.fetchval("SELECT count(*) FROM requests"):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    assert await table_segment_names(api) == []


async def test_a_create_that_does_not_finish_in_time_is_deadline_exceeded(db_url: str) -> None:
    async with kvt_api(db_url, completion_timeout_s=0.3) as api:
        api.hold_workers()
        with pytest.raises(GRPCError) as raised:
            await api.stub.createKeyValueTable(config())
        assert raised.value.status == Status.DEADLINE_EXCEEDED
        # The request stays queued and completes once workers run; the table then exists.
        api.release_workers()
        deadline = asyncio.get_running_loop().time() + 10
        while (await api.kvts.get_kvt(SC, "t")).value.state != KvtState.ACTIVE:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        assert await create(api, config()) == pb.CreateKeyValueTableStatus.TABLE_EXISTS


# --- getCurrentSegmentsKeyValueTable ---------------------------------------------------------------


async def test_segments_of_a_missing_table_are_not_found(api: Api) -> None:
    with pytest.raises(GRPCError) as raised:
        await api.stub.getCurrentSegmentsKeyValueTable(info("nope"))
    assert raised.value.status == Status.NOT_FOUND


async def test_segments_of_a_table_still_creating_are_failed_precondition(api: Api) -> None:
    api.hold_workers()
    call = asyncio.create_task(create(api, config()))
    await wait_for_row(api, "t")
    with pytest.raises(GRPCError) as raised:
        await api.stub.getCurrentSegmentsKeyValueTable(info())
    assert raised.value.status == Status.FAILED_PRECONDITION
    # Its configuration is known already.
    assert (
        await api.stub.getKeyValueTableConfiguration(info())
    ).status == pb.KeyValueTableConfigResponse.SUCCESS

    api.release_workers()
    assert await call == pb.CreateKeyValueTableStatus.SUCCESS
    assert len((await api.stub.getCurrentSegmentsKeyValueTable(info())).segmentRanges) == 3


@pytest.mark.parametrize("scope, name", [("", "t"), (SC, "")])
async def test_empty_names_are_invalid_argument(api: Api, scope: str, name: str) -> None:
    for call in (api.stub.getCurrentSegmentsKeyValueTable, api.stub.deleteKeyValueTable):
        with pytest.raises(GRPCError) as raised:
            await call(info(name, scope))
        assert raised.value.status == Status.INVALID_ARGUMENT


# --- getKeyValueTableConfiguration -------------------------------------------------------------------


async def test_configuration_of_a_missing_table_is_table_not_found(api: Api) -> None:
    got = await api.stub.getKeyValueTableConfiguration(info("nope"))
    assert got.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
    assert not got.HasField("config")


async def test_configuration_when_the_store_fails_is_failure(api: Api, db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=1)
    await pool.close()
    broken = KvtService(
        PgKvtStore(pool),
        api.services.clock,
        api.services.requests,
        completion_timeout_s=TEST_SETTINGS.completion_timeout_s,
    )
    async with served(api.services, extensions=[KvtRpcs(broken)]) as stub:
        got = await stub.getKeyValueTableConfiguration(info())
    assert got.status == pb.KeyValueTableConfigResponse.FAILURE


# --- deleteKeyValueTable -------------------------------------------------------------------------------


async def test_delete_of_a_missing_table_is_table_not_found(api: Api) -> None:
    assert (await api.stub.deleteKeyValueTable(info("nope"))).status == pb.DeleteKVTableStatus.TABLE_NOT_FOUND
    assert (await api.stub.deleteKeyValueTable(info("t", "noscope"))).status == (
        pb.DeleteKVTableStatus.TABLE_NOT_FOUND
    )


async def test_after_delete_the_table_is_gone_everywhere(api: Api) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS
    assert (await api.stub.deleteKeyValueTable(info())).status == pb.DeleteKVTableStatus.SUCCESS

    assert (await api.stub.deleteKeyValueTable(info())).status == pb.DeleteKVTableStatus.TABLE_NOT_FOUND
    got = await api.stub.getKeyValueTableConfiguration(info())
    assert got.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
    with pytest.raises(GRPCError) as raised:
        await api.stub.getCurrentSegmentsKeyValueTable(info())
    assert raised.value.status == Status.NOT_FOUND
    listed = await api.stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SC)))
    assert list(listed.kvtables) == []


async def test_two_concurrent_deletes_both_succeed(api: Api) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS
    outcomes = await asyncio.gather(*(api.stub.deleteKeyValueTable(info()) for _ in range(2)))
    assert [o.status for o in outcomes] == [pb.DeleteKVTableStatus.SUCCESS] * 2
    assert await table_segment_names(api) == []


async def test_delete_of_a_table_still_creating_waits_for_both(api: Api) -> None:
    api.hold_workers()
    creating = asyncio.create_task(create(api, config()))
    await wait_for_row(api, "t")
    deleting = asyncio.create_task(api.stub.deleteKeyValueTable(info()))
    await asyncio.sleep(0.1)
    assert not deleting.done()

    api.release_workers()
    assert (await deleting).status == pb.DeleteKVTableStatus.SUCCESS
    # The create never saw its table ACTIVE: it was deleted first.
    assert await creating == pb.CreateKeyValueTableStatus.FAILURE
    assert await table_segment_names(api) == []


# --- listKeyValueTablesInScope -------------------------------------------------------------------------


async def test_listing_pages_to_an_empty_page_that_keeps_the_token(api: Api) -> None:
    api.hold_workers()
    names = ["c", "a", "b"]
    calls = [asyncio.create_task(create(api, config(name=n))) for n in names]
    for name in names:
        await wait_for_row(api, name)

    # Tables still CREATING are listed (Java lists its scope table, which has them).
    first = await api.stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SC)))
    assert [t.kvtName for t in first.kvtables] == ["a", "b", "c"]
    assert first.continuationToken.token and decode_token(first.continuationToken.token) == "c"

    end = await api.stub.listKeyValueTablesInScope(
        pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SC), continuationToken=first.continuationToken)
    )
    assert end.status == pb.KVTablesInScopeResponse.SUCCESS
    assert list(end.kvtables) == []
    assert end.continuationToken.token == first.continuationToken.token

    api.release_workers()
    assert await asyncio.gather(*calls) == [pb.CreateKeyValueTableStatus.SUCCESS] * 3


async def test_listing_a_missing_scope_is_scope_not_found(api: Api) -> None:
    token = pb.ContinuationToken(token=encode_token("a"))
    listed = await api.stub.listKeyValueTablesInScope(
        pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="nope"), continuationToken=token)
    )
    assert listed.status == pb.KVTablesInScopeResponse.SCOPE_NOT_FOUND
    assert list(listed.kvtables) == []
    assert listed.continuationToken == token


async def test_listing_an_empty_scope_is_an_empty_success(api: Api) -> None:
    listed = await api.stub.listKeyValueTablesInScope(pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope=SC)))
    assert listed.status == pb.KVTablesInScopeResponse.SUCCESS
    assert list(listed.kvtables) == [] and listed.continuationToken.token == ""


async def test_a_malformed_token_is_invalid_argument(api: Api) -> None:
    with pytest.raises(GRPCError) as raised:
        await api.stub.listKeyValueTablesInScope(
            pb.KVTablesInScopeRequest(
                scope=pb.ScopeInfo(scope=SC), continuationToken=pb.ContinuationToken(token="!")
            )
        )
    assert raised.value.status == Status.INVALID_ARGUMENT


# --- final failures: the request parked, the table's state restored, the caller answered at once ---


async def _refused(*_args: object, **_kwargs: object) -> None:
    raise InvalidInput("injected: the segment store refuses")


async def test_defect_16_a_kvt_create_the_segment_store_refuses_is_failure_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api.services.segment_store, "create_table_segment", _refused)
    started = time.monotonic()
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.FAILURE
    assert time.monotonic() - started < 10, "answered when its request was parked, not at the deadline"
    [row] = await parked_soon(api.services.requests)
    assert row.kind is RequestKind.CREATE_KVT and "refuses" in (row.last_error or "")
    # The incarnation left CREATING for good: the name is free, and a new create succeeds.
    got = await api.stub.getKeyValueTableConfiguration(info())
    assert got.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
    monkeypatch.undo()
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS


async def test_defect_16_a_kvt_delete_the_segment_store_refuses_is_failure_and_the_table_active(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await create(api, config()) == pb.CreateKeyValueTableStatus.SUCCESS
    monkeypatch.setattr(api.services.segment_store, "delete_table_segment", _refused)
    started = time.monotonic()
    assert (await api.stub.deleteKeyValueTable(info())).status == pb.DeleteKVTableStatus.FAILURE
    assert time.monotonic() - started < 10, "answered when its request was parked, not at the deadline"
    [row] = await parked_soon(api.services.requests)
    assert row.kind is RequestKind.DELETE_KVT
    assert (await api.kvts.get_kvt(SC, "t")).value.state is KvtState.ACTIVE
    monkeypatch.undo()
    assert (await api.stub.deleteKeyValueTable(info())).status == pb.DeleteKVTableStatus.SUCCESS
    got = await api.stub.getKeyValueTableConfiguration(info())
    assert got.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND
