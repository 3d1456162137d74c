"""Calls to the controller's gRPC for the key-value table client: its address, and its answers
as KvtErrors.

Invariant: no grpclib exception leaves this module's `ask_controller`: NOT_FOUND is TableNotFound,
INVALID_ARGUMENT InvalidTable, anything else (and an unreachable controller) TableUnavailable.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable
from pathlib import Path
from typing import Final, TypeVar

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.kvtclient.errors import InvalidTable, TableNotFound, TableUnavailable

T = TypeVar("T")

# The bound on one controller call (Pravega's clients wait as long for one RPC).
CONTROLLER_TIMEOUT_S: Final = 30.0


# The schemes that mean TLS to Pravega's Rust client (its ClientConfig); tcp:// or none is plain.
TLS_SCHEMES: Final = ("tls", "ssl", "tcps", "pravegas")


def parse_controller(address: str) -> tuple[str, int]:
    """`host:port`, `tcp://host:port`, `tls://host:port` (or another of TLS_SCHEMES) or
    `[v6]:port`, the forms Pravega's clients take."""
    scheme, sep, rest = address.partition("://")
    text = rest if sep and scheme in ("tcp", *TLS_SCHEMES) else address
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"a controller address is host:port, not {address!r}")
    return host.strip("[]"), int(port)


def controller_tls(address: str, trust_file: Path | None = None) -> ssl.SSLContext | None:
    """None for a plain controller address; for a TLS one (`tls://host:port`), a context that
    verifies the controller's and the segment stores' certificates against `trust_file` (PEM CA
    certificates, as the Rust client's pravega_client_tls_cert_path), else the system's CAs."""
    scheme, sep, _ = address.partition("://")
    if not sep or scheme not in TLS_SCHEMES:
        return None
    context = ssl.create_default_context(cafile=None if trust_file is None else str(trust_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # gRPC needs HTTP/2; the segment stores' wire protocol ignores ALPN.
    context.set_alpn_protocols(["h2"])
    return context


def open_channel(address: str, tls: ssl.SSLContext | None) -> Channel:
    """A channel to the controller at `address`, over TLS with `tls` (None: plain unless the
    address says TLS, then verified against the system's CAs)."""
    host, port = parse_controller(address)
    return Channel(host, port, ssl=tls if tls is not None else controller_tls(address))


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
