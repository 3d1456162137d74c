"""A segment store's membership: it registers its host:port, heartbeats, and follows the
container map, telling its server which containers it gained or lost.

Invariant: the store serves a container only while the map gives it that container and its own
heartbeats are younger than the expiry (after that the leader may have handed its containers to
another store, so it stops serving rather than serve beside the new owner). A host row removed
by the leader is registered again at the next heartbeat. A clean stop deregisters, so the
containers move at once instead of after the expiry.

The stores of one `serve --processes N` run share one address and so one host row (`shared`):
each heartbeats it at the version it reads, a sibling's beat in between is no removal (the row is
alive either way), and only the store the supervisor stops last (`leaves`) deregisters it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from app.domain.errors import NotFound, StoreUnavailable, WriteConflict
from app.ports import Clock, ContainerMapStore, HostAddress
from app.segmentstore.server.ownership import ContainerOwnership
from app.waiting import wait_event

log = logging.getLogger("pgcontroller.segment-store.membership")

_WATCHED_TABLES = frozenset({"container_map", "segment_store_hosts"})
_SHARED_BEAT_ATTEMPTS = 3


class StoreMembership:
    def __init__(
        self,
        store: ContainerMapStore,
        clock: Clock,
        ownership: ContainerOwnership,
        on_lost: Callable[[frozenset[int]], None],
        *,
        heartbeat_s: float,
        expiry_s: float,
        poll_s: float = 1.0,
        shared: bool = False,
        leaves: bool = True,
    ) -> None:
        if not 0 < heartbeat_s < expiry_s:
            raise ValueError(f"the heartbeat period ({heartbeat_s}) must be below the expiry ({expiry_s})")
        self._store = store
        self._clock = clock
        self.ownership = ownership
        self._on_lost = on_lost
        self._heartbeat_s = heartbeat_s
        self._expiry_s = expiry_s
        self._poll_s = poll_s
        self._shared = shared
        self._leaves = leaves
        self._version: int | None = None
        self._last_beat = 0.0  # loop time of the last heartbeat that landed
        self._wake = asyncio.Event()
        self.registrations = 0  # how many times this store registered (1 + re-registrations)

    @property
    def me(self) -> HostAddress:
        return self.ownership.me

    def changed(self, table: str) -> None:
        """PgListener cluster-change callback: the map or the host set changed."""
        if table in _WATCHED_TABLES:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        """Registers and reads the map once; raises when the database cannot be reached."""
        await self._heartbeat()
        await self._refresh()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + self._heartbeat_s
        while True:
            # Cleared before the read, so a change committed while reading triggers another.
            self._wake.clear()
            if loop.time() >= next_beat:
                next_beat = loop.time() + self._heartbeat_s
                with contextlib.suppress(StoreUnavailable):
                    await self._heartbeat()
            if loop.time() - self._last_beat >= self._expiry_s:
                self._fence()
            else:
                try:
                    await self._refresh()
                except StoreUnavailable as exc:
                    log.warning("cannot read the container map, serving from the last one: %s", exc)
            timeout = max(0.0, min(self._poll_s, next_beat - loop.time()))
            await wait_event(self._wake, timeout)

    async def leave(self) -> None:
        """Deregisters (a clean stop): the leader moves the containers without waiting out the
        expiry. Best effort: an unreachable database leaves that to the expiry."""
        if self._version is None:
            return
        if not self._leaves:
            self._version = None  # the address stays registered for the others behind it
            return
        with contextlib.suppress(StoreUnavailable, NotFound, WriteConflict):
            if self._shared:
                # The others behind this address beat it too: the version is theirs as often.
                self._version = (await self._store.get_host(self.me)).version
            await self._store.remove_hosts([(self.me, self._version)])
        self._version = None

    async def _heartbeat(self) -> None:
        now = self._clock.now_ms()
        try:
            version = None
            if self._version is not None:
                version = await self._store.heartbeat_host(self.me, now, self._version)
            if version is None and self._shared and self._version is not None:
                version = await self._shared_beat(now)
            if version is None:
                version = await self._register(now)
        except StoreUnavailable as exc:
            log.warning("segment store %s cannot heartbeat: %s", self.me, exc)
            raise
        self._version = version
        self._last_beat = asyncio.get_running_loop().time()

    async def _shared_beat(self, now: int) -> int | None:
        """A beat at the version the row has now (a sibling beat it since ours); None when the row
        is gone, to register again."""
        for _ in range(_SHARED_BEAT_ATTEMPTS):
            try:
                current = await self._store.get_host(self.me)
            except NotFound:
                return None
            version = await self._store.heartbeat_host(self.me, now, current.version)
            if version is not None:
                return version
        # The siblings beat it between each read and write: it is alive, which is all a beat says.
        return current.version

    async def _register(self, now: int) -> int:
        if self._version is not None:
            log.warning("segment store %s was removed from the cluster; registering again", self.me)
        while True:
            await self._store.register_host(self.me, now, heartbeat=True)
            try:
                # Our own row, new or left by an earlier life of this address: take it over.
                current = await self._store.get_host(self.me)
            except NotFound:
                continue  # removed between the two statements: insert again
            version = await self._store.heartbeat_host(self.me, now, current.version)
            if version is not None:
                self.registrations += 1
                log.info("segment store %s registered", self.me)
                return version

    async def _refresh(self) -> None:
        rows = await self._store.read_container_map()
        gained, lost = self.ownership.update({c: row.value for c, row in rows.items()})
        if gained:
            log.info("segment store %s now serves containers %s", self.me, sorted(gained))
        if lost:
            log.info("segment store %s no longer serves containers %s", self.me, sorted(lost))
            self._on_lost(lost)

    def _fence(self) -> None:
        lost = self.ownership.disown_all()
        if lost:
            log.warning(
                "segment store %s has not heartbeaten for %.1f s: it stops serving containers %s",
                self.me,
                self._expiry_s,
                sorted(lost),
            )
            self._on_lost(lost)
