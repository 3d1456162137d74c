"""Creating and deleting key-value tables through the controller's gRPC, as Pravega's
KeyValueTableManager does: True when this call created (deleted) the table, False when it existed
(did not exist) already."""

from __future__ import annotations

import ssl

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.kvtclient.controller import CONTROLLER_TIMEOUT_S, ask_controller, open_channel
from app.kvtclient.errors import InvalidTable, ScopeNotFound, TableUnavailable

_CREATED = pb.CreateKeyValueTableStatus


async def create_table(
    controller: str,
    scope: str,
    name: str,
    *,
    partitions: int,
    primary_key_length: int,
    secondary_key_length: int = 0,
    rollover_size_bytes: int = 0,
    tls: ssl.SSLContext | None = None,
) -> bool:
    """Creates the table with `partitions` table segments; returns once it is ACTIVE. Its keys
    are a primary key of `primary_key_length` bytes (which picks the segment) followed by a
    secondary key of `secondary_key_length` bytes (0: none)."""
    config = pb.KeyValueTableConfig(
        scope=scope,
        kvtName=name,
        partitionCount=partitions,
        primaryKeyLength=primary_key_length,
        secondaryKeyLength=secondary_key_length,
        rolloverSizeBytes=rollover_size_bytes,
    )
    channel = open_channel(controller, tls)
    try:
        stub = ControllerServiceStub(channel)
        answer = await ask_controller(
            f"creating {scope}/{name}", stub.createKeyValueTable(config, timeout=CONTROLLER_TIMEOUT_S)
        )
    finally:
        channel.close()
    match answer.status:
        case _CREATED.SUCCESS:
            return True
        case _CREATED.TABLE_EXISTS:
            return False
        case _CREATED.SCOPE_NOT_FOUND:
            raise ScopeNotFound(f"scope {scope} does not exist")
        case _CREATED.INVALID_TABLE_NAME:
            raise InvalidTable(f"{name!r} is not a valid key-value table name")
    raise TableUnavailable(f"the controller failed to create key-value table {scope}/{name}")


async def delete_table(controller: str, scope: str, name: str, *, tls: ssl.SSLContext | None = None) -> bool:
    """Deletes the table and its segments (its data with them); returns once it is gone."""
    channel = open_channel(controller, tls)
    try:
        stub = ControllerServiceStub(channel)
        answer = await ask_controller(
            f"deleting {scope}/{name}",
            stub.deleteKeyValueTable(
                pb.KeyValueTableInfo(scope=scope, kvtName=name), timeout=CONTROLLER_TIMEOUT_S
            ),
        )
    finally:
        channel.close()
    if answer.status == pb.DeleteKVTableStatus.SUCCESS:
        return True
    if answer.status == pb.DeleteKVTableStatus.TABLE_NOT_FOUND:
        return False
    raise TableUnavailable(f"the controller failed to delete key-value table {scope}/{name}")
