"""Scopes with reader groups and key-value tables, over the RPCs exactly as `serve` wires them:
deleteScope refuses while any member exists; deleteScopeRecursive removes streams, reader groups
(with their subscriptions and state streams) and tables (with their segments)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.main import grpc_extensions
from app.testing.controller import Services
from tests.api.conftest import served
from tests.api.test_grpc_streams import config, make_scope
from tests.support.readergroups import rg_config, stream_cut

AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = 2


@pytest.fixture
async def wired(services: Services) -> AsyncIterator[ControllerServiceStub]:
    async with served(services, grpc_extensions(services.controller)) as stub:
        yield stub


def table(name: str) -> pb.KeyValueTableConfig:
    return pb.KeyValueTableConfig(
        scope="sc", kvtName=name, partitionCount=2, primaryKeyLength=4, secondaryKeyLength=0
    )


async def test_delete_scope_refuses_while_a_group_or_table_remains(wired: ControllerServiceStub) -> None:
    await make_scope(wired)
    await wired.createStream(config("sc", "s"))
    group = rg_config("sc", "rg", [stream_cut("sc", "s")])
    assert (await wired.createReaderGroup(group)).status == pb.CreateReaderGroupResponse.SUCCESS
    created = await wired.createKeyValueTable(table("t"))
    assert created.status == pb.CreateKeyValueTableStatus.SUCCESS

    info = pb.StreamInfo(scope="sc", stream="s")
    assert (await wired.sealStream(info)).status == pb.UpdateStreamStatus.SUCCESS
    assert (await wired.deleteStream(info)).status == pb.DeleteStreamStatus.SUCCESS
    assert (await wired.deleteScope(pb.ScopeInfo(scope="sc"))).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY

    stored = (await wired.getReaderGroupConfig(pb.ReaderGroupInfo(scope="sc", readerGroup="rg"))).config
    deleted = await wired.deleteReaderGroup(
        pb.ReaderGroupInfo(scope="sc", readerGroup="rg", readerGroupId=stored.readerGroupId)
    )
    assert deleted.status == pb.DeleteReaderGroupStatus.SUCCESS
    assert (await wired.deleteScope(pb.ScopeInfo(scope="sc"))).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY

    gone = await wired.deleteKeyValueTable(pb.KeyValueTableInfo(scope="sc", kvtName="t"))
    assert gone.status == pb.DeleteKVTableStatus.SUCCESS
    assert (await wired.deleteScope(pb.ScopeInfo(scope="sc"))).status == pb.DeleteScopeStatus.SUCCESS


async def test_recursive_delete_removes_groups_tables_and_their_resources(
    wired: ControllerServiceStub, services: Services
) -> None:
    await make_scope(wired)
    await make_scope(wired, "other")
    await wired.createStream(config("sc", "s"))
    await wired.createStream(config("other", "kept"))
    group = rg_config(
        "sc",
        "rg",
        [stream_cut("sc", "s"), stream_cut("other", "kept")],
        retention=AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
    )
    assert (await wired.createReaderGroup(group)).status == pb.CreateReaderGroupResponse.SUCCESS
    kept = await wired.listSubscribers(pb.StreamInfo(scope="other", stream="kept"))
    assert list(kept.subscribers) == ["sc/rg"]
    for name in ("t1", "t2"):
        assert (await wired.createKeyValueTable(table(name))).status == pb.CreateKeyValueTableStatus.SUCCESS

    deleted = await wired.deleteScopeRecursive(pb.ScopeInfo(scope="sc"))
    assert deleted.status == pb.DeleteScopeStatus.SUCCESS

    assert not (await wired.checkScopeExists(pb.ScopeInfo(scope="sc"))).exists
    kept = await wired.listSubscribers(pb.StreamInfo(scope="other", stream="kept"))
    assert list(kept.subscribers) == []
    left = await services.pool.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE 'sc/%'")
    assert left == 0
    for table_name in ("reader_groups", "kvtables", "streams"):
        count = await services.pool.fetchval(f"SELECT count(*) FROM {table_name} WHERE scope = 'sc'")
        assert count == 0, table_name
    # The scope's name is free again, and a new table there starts after the old numbering.
    await make_scope(wired)
    assert (await wired.createKeyValueTable(table("t1"))).status == pb.CreateKeyValueTableStatus.SUCCESS
