"""Calls to the controller's gRPC for the key-value table client: its address, and its answers
as KvtErrors.

Invariant: no grpclib exception leaves this module's `ask_controller`: NOT_FOUND is TableNotFound,
INVALID_ARGUMENT InvalidTable, anything else (and an unreachable controller) TableUnavailable.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.kvtclient.errors import InvalidTable, TableNotFound, TableUnavailable

T = TypeVar("T")

# The bound on one controller call (Pravega's clients wait as long for one RPC).
CONTROLLER_TIMEOUT_S: Final = 30.0


def parse_controller(address: str) -> tuple[str, int]:
    """`host:port`, `tcp://host:port` or `[v6]:port` (the plain-text forms Pravega's clients take)."""
    text = address.removeprefix("tcp://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"a controller address is host:port, not {address!r}")
    return host.strip("[]"), int(port)


async def ask_controller(what: str, call: Awaitable[T]) -> T:
    """One controller call; its failures as KvtErrors."""
    try:
        return await call
    except GRPCError as exc:
        if exc.status == Status.NOT_FOUND:
            raise TableNotFound(f"{what}: {exc.message}") from exc
        if exc.status == Status.INVALID_ARGUMENT:
            raise InvalidTable(f"{what}: {exc.message}") from exc
        raise TableUnavailable(f"{what}: the controller answered {exc.status.name}: {exc.message}") from exc
    except (OSError, StreamTerminatedError, TimeoutError) as exc:
        raise TableUnavailable(f"{what}: the controller cannot be reached: {exc!r}") from exc
