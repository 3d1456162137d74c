"""Opening an asyncpg connection across several hosts the way libpq does, and not letting a
silent peer hang one.

asyncpg gives one timeout to its whole host list: a first host that drops packets (a partitioned
or powered-off primary) uses all of it, and the hosts after it are never tried. A serve given every
node of a cluster then could not reach the new primary while the old one was cut off (seen in the
partition test: each attempt spent its 60 s on the old primary). Here each host gets its own time,
as libpq's connect_timeout is per host, and `prefer-standby` tries every host for a standby before
it takes any.

A connection whose server vanished without a word (no reset crosses a partition) otherwise hangs
for the command timeout and then as long again for the cancel request. TCP_USER_TIMEOUT ends one
whose sent bytes go unacknowledged, keepalives one that sits idle (the LISTEN session, the lock
session, idle pool connections), so a pool replaces them within seconds. libpq's keepalives_* and
tcp_user_timeout URL parameters are accepted and not read (pgurl): these values apply.
"""

from __future__ import annotations

import socket
from typing import Any

import asyncpg

from app.store.uncancelled import UncancelledConnection

# Per host when a URL names several and no connect_timeout: a live PostgreSQL answers a connect
# and its authentication in well under this; a host that drops packets is passed over after it.
PER_HOST_TIMEOUT_S = 5.0
TCP_USER_TIMEOUT_MS = 10_000
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 5, 2, 3

# Raised for one host that says nothing about the others: the next one is tried.
_NEXT_HOST = (OSError, TimeoutError, asyncpg.TargetServerAttributeNotMatched, asyncpg.CannotConnectNowError)


async def connect(dsn: str | None = None, **arguments: Any) -> asyncpg.Connection:
    """asyncpg.connect's arguments (asyncpg's pool passes a dsn, None here, and its own keyword
    arguments too); one connection, tuned."""
    hosts, ports = arguments.get("host"), arguments.get("port")
    # Every connection of ours, pooled or not: a query given up on must not be cancelled
    # (app/store/uncancelled.py).
    arguments["connection_class"] = UncancelledConnection
    if dsn is not None or not isinstance(hosts, list):
        return _tuned(await asyncpg.connect(dsn, **arguments))
    if not isinstance(ports, list):
        ports = [ports] * len(hosts)
    per_host = arguments.get("timeout") or PER_HOST_TIMEOUT_S
    wanted = arguments.get("target_session_attrs") or "any"
    passes = ["standby", "any"] if wanted == "prefer-standby" else [wanted]
    failure: BaseException | None = None
    for attrs in passes:
        for host, port in zip(hosts, ports, strict=True):
            one = {**arguments, "host": host, "timeout": per_host, "target_session_attrs": attrs}
            one["port"] = port
            if port is None:
                del one["port"]
            try:
                return _tuned(await asyncpg.connect(**one))
            except _NEXT_HOST as exc:
                failure = exc
    assert failure is not None  # hosts is never empty: pgurl gives a list only for two or more
    raise failure


def _tuned(conn: asyncpg.Connection) -> asyncpg.Connection:
    # asyncpg keeps its transport private and exposes no socket options; the socket is the
    # kernel's, and options set on it after connecting are what libpq would have set before.
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return conn
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
    return conn
