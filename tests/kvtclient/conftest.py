"""A controller with its workers and embedded segment store, its gRPC served on a loopback port,
for the key-value table client's tests: the client is given only that address, as a user's is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.kvtclient import KeyValueTable
from app.testing.controller import Services, running_controller
from tests.support.grpc_served import grpc_port, grpc_stub

SC = "kvc"


@dataclass
class Cluster:
    services: Services
    stub: ControllerServiceStub
    address: str

    async def create_table(self, name: str, partitions: int, primary: int, secondary: int = 0) -> None:
        status = await self.stub.createKeyValueTable(
            pb.KeyValueTableConfig(
                scope=SC,
                kvtName=name,
                partitionCount=partitions,
                primaryKeyLength=primary,
                secondaryKeyLength=secondary,
            )
        )
        assert status.status == pb.CreateKeyValueTableStatus.SUCCESS

    async def open(self, name: str) -> KeyValueTable:
        return await KeyValueTable.open(self.address, SC, name)

    async def stored(self, name: str) -> dict[str, set[bytes]]:
        """The keys the embedded store holds, per table segment, read from its tables."""
        rows = await self.services.pool.fetch(
            "SELECT s.name, e.key FROM embedded_segments s LEFT JOIN table_entries e ON e.segment = s.name"
            " WHERE s.kind = 'table' AND s.name LIKE $1",
            f"{SC}/{name}_kvtable/%",
        )
        result: dict[str, set[bytes]] = {}
        for r in rows:
            keys = result.setdefault(r["name"], set())
            if r["key"] is not None:
                keys.add(bytes(r["key"]))
        return result


@asynccontextmanager
async def cluster(db_url: str, **overrides: object) -> AsyncIterator[Cluster]:
    """A controller with its workers and embedded segment store, its gRPC served on a loopback
    port the client is given, as a user's client would be."""
    async with (
        running_controller(db_url, **overrides) as services,
        grpc_port(services, tokens=services.storage.tokens) as port,
        grpc_stub(port) as stub,
    ):
        await stub.createScope(pb.ScopeInfo(scope=SC))
        yield Cluster(services, stub, f"127.0.0.1:{port}")


@pytest.fixture
async def kvc(db_url: str) -> AsyncIterator[Cluster]:
    async with cluster(db_url) as running:
        yield running
