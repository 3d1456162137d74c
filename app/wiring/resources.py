"""What every capability shares, built once per process, and the shape of what a capability adds.

Invariant: one pool, one clock, one record cache, one notification listener and one lock session
per process; a capability never opens its own, so losing the lock session loses every claim at once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from app.clock import SystemClock
from app.settings import Settings
from app.store.cache import RecordCache
from app.store.cluster import MEMBER_APPLICATION_PREFIX
from app.store.db import Database
from app.store.locks import PgAdvisoryLocks
from app.store.notifications import PgListener
from app.store.requests import PgRequestQueue
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore

# application_name holds 63 bytes; the member prefix takes 11 of them.
MAX_MEMBER_ID = 52

RestExtension = Callable[[web.Application], None]
Loop = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Contribution:
    """What one capability adds to the process: objects serving more RPCs (see ControllerService),
    REST routes (see create_app), and background loops by name, each running until cancelled."""

    grpc: tuple[object, ...] = ()
    rest: tuple[RestExtension, ...] = ()
    loops: Mapping[str, Loop] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    url: str
    pool: Database
    clock: SystemClock
    cache: RecordCache
    listener: PgListener
    locks: PgAdvisoryLocks
    member_id: str
    # The metadata stores every workflow reads (streams, transactions, retention, reader groups...).
    scope_store: PgScopeStore
    stream_store: PgStreamStore
    requests: PgRequestQueue
    txn_store: PgTxnStore


def open_resources(settings: Settings, url: str, pool: Database) -> Resources:
    """`url` is the database `pool` connects to (settings.db_url, or the embedded one's)."""
    member_id = settings.instance_id[:MAX_MEMBER_ID]
    cache = RecordCache()
    return Resources(
        url=url,
        pool=pool,
        clock=SystemClock(),
        cache=cache,
        listener=PgListener(url, cache),
        locks=PgAdvisoryLocks(url, application_name=MEMBER_APPLICATION_PREFIX + member_id),
        member_id=member_id,
        scope_store=PgScopeStore(pool),
        stream_store=PgStreamStore(pool, cache),
        requests=PgRequestQueue(pool),
        txn_store=PgTxnStore(pool),
    )
