"""One LISTEN connection per process: cache invalidation and request wake-ups.

While the connection is up the record cache is trusted; the moment it is lost (database
restart, network) the cache is distrusted and emptied, because notifications sent meanwhile
are gone. The loop reconnects with backoff forever; it never ends the process on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

from app.store.cache import RecordCache
from app.store.dsn import open_connection
from app.store.pool import asyncpg_dsn
from app.waiting import bounded, wait_event

log = logging.getLogger("pgcontroller.notifications")

STREAMS_CHANNEL = "pgc_streams"
REQUESTS_CHANNEL = "pgc_requests"
CLUSTER_CHANNEL = "pgc_cluster"
STATES_CHANNEL = "pgc_states"
VIEWS_CHANNEL = "pgc_views"


class PgListener:
    def __init__(
        self,
        url: str,
        cache: RecordCache,
        *,
        heartbeat_s: float = 2.0,
        first_backoff_s: float = 0.05,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._dsn = asyncpg_dsn(url)
        self._cache = cache
        self._heartbeat_s = heartbeat_s
        self._first_backoff_s = first_backoff_s
        self._max_backoff_s = max_backoff_s
        self._request_callbacks: list[Callable[[str], None]] = []
        self._connected_callbacks: list[Callable[[], None]] = []
        self._cluster_callbacks: list[Callable[[str], None]] = []
        self._state_callbacks: list[Callable[[str], None]] = []
        self._view_callbacks: list[Callable[[str], None]] = []
        self.connected = asyncio.Event()

    def on_request(self, callback: Callable[[str], None]) -> None:
        """`callback("processor:bucket:scope/stream")` for each request inserted (after commit)."""
        self._request_callbacks.append(callback)

    def on_cluster_change(self, callback: Callable[[str], None]) -> None:
        """`callback(table_name)` after a committed change to membership, bucket assignments,
        segment-store hosts or the container map."""
        self._cluster_callbacks.append(callback)

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        """`callback("states" | "config")` after a committed change to participants' customized
        states (one per transaction) or to the aggregation config: wakes the aggregator."""
        self._state_callbacks.append(callback)

    def on_view_change(self, callback: Callable[[str], None]) -> None:
        """`callback("<state name>/<resource>:<version | deleted>")` per customized view moved."""
        self._view_callbacks.append(callback)

    def _state_changed(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for callback in self._state_callbacks:
            callback(payload)

    def _view_changed(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for callback in self._view_callbacks:
            callback(payload)

    def on_connected(self, callback: Callable[[], None]) -> None:
        """Called after each (re)connection: notifications may have been missed meanwhile."""
        self._connected_callbacks.append(callback)

    async def run(self) -> None:
        backoff = self._first_backoff_s
        while True:
            try:
                await self._listen_until_lost()
                backoff = self._first_backoff_s
            # InternalClientError: the driver's own, when the server dies in the middle of a LISTEN.
            except (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.InternalClientError,
                TimeoutError,
            ) as exc:
                log.warning("notification connection lost: %r; reconnecting", exc)
            finally:
                self.connected.clear()
                self._cache.distrust()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    async def _listen_until_lost(self) -> None:
        conn = await bounded(open_connection(self._dsn), limit_s=10)
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        try:
            await conn.add_listener(STREAMS_CHANNEL, self._stream_changed)
            await conn.add_listener(REQUESTS_CHANNEL, self._request_inserted)
            await conn.add_listener(CLUSTER_CHANNEL, self._cluster_changed)
            await conn.add_listener(STATES_CHANNEL, self._state_changed)
            await conn.add_listener(VIEWS_CHANNEL, self._view_changed)
            self._cache.trust()
            self.connected.set()
            for callback in self._connected_callbacks:
                callback()
            while not lost.is_set():
                await wait_event(lost, self._heartbeat_s)
                if not lost.is_set():
                    # A silent network can hide a dead server; a round trip proves it is alive.
                    await bounded(conn.fetchval("SELECT 1"), limit_s=self._heartbeat_s * 2)
        finally:
            with contextlib.suppress(Exception):
                await bounded(conn.close(), limit_s=1)

    def _stream_changed(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            stream_id = int(payload)
        except ValueError:
            self._cache.distrust()
            self._cache.trust()
            return
        self._cache.invalidate_stream(stream_id)

    def _request_inserted(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for callback in self._request_callbacks:
            callback(payload)

    def _cluster_changed(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        for callback in self._cluster_callbacks:
            callback(payload)
