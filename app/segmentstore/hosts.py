"""Container -> segment-store host map for getURI, from a configured host list.

Host i of n owns containers {i, i+n, i+2n, ...}: Pravega's initial uniform assignment. The
cluster issue replaces the static list with a leader-maintained map; this stays its seed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from app.domain.containers import container_for_segment
from app.domain.errors import InvalidInput, StoreUnavailable
from app.domain.hosts import HostAddress
from app.ports import ContainerMapStore
from app.waiting import wait_event


def uniform_assignment(container_count: int, hosts: Sequence[HostAddress]) -> dict[int, HostAddress]:
    if container_count <= 0:
        raise InvalidInput("the container count must be positive")
    if not hosts:
        raise InvalidInput("at least one segment-store host is needed")
    return {container: hosts[container % len(hosts)] for container in range(container_count)}


class StaticContainerMap:
    """SegmentStoreLocator over a fixed assignment."""

    def __init__(self, container_count: int, hosts: Sequence[HostAddress]) -> None:
        self.container_count = container_count
        self._owners = uniform_assignment(container_count, hosts)

    def container_for(self, qualified_name: str) -> int:
        return container_for_segment(qualified_name, self.container_count)

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        return self._owners[self.container_for(qualified_name)]

    def assignment(self) -> dict[int, HostAddress]:
        return dict(self._owners)


_CONTAINER_MAP_TABLE = "container_map"
_log = logging.getLogger("pgcontroller.container-map")


class SharedContainerMap:
    """SegmentStoreLocator over the cluster's container map, as an in-memory snapshot.

    `endpoint_for_segment` never waits for the database: it answers from the last snapshot,
    which `run()` re-reads on each change notification of the map (wire `changed` to
    PgListener.on_cluster_change and `wake` to on_connected) and at least every `poll_s`, so a
    missed notification costs at most one poll. Containers the map does not assign (a fresh
    cluster, no segment store registered) go to the static hosts, host i of n owning
    {i, i+n, ...}; before the first read every container does.
    """

    def __init__(
        self,
        container_count: int,
        static_hosts: Sequence[HostAddress],
        store: ContainerMapStore,
        *,
        poll_s: float = 1.0,
    ) -> None:
        if container_count <= 0:
            raise InvalidInput("the container count must be positive")
        if not static_hosts:
            raise InvalidInput("at least one segment-store host is needed")
        self.container_count = container_count
        self._static_hosts = tuple(static_hosts)
        self._store = store
        self._poll_s = poll_s
        # Replaced whole, never mutated: a reader sees one complete map or the next one.
        self._owners: dict[int, HostAddress] = {}
        self._wake = asyncio.Event()
        self.loaded = asyncio.Event()  # set once the first read succeeded

    def container_for(self, qualified_name: str) -> int:
        return container_for_segment(qualified_name, self.container_count)

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress:
        return self._owner(self.container_for(qualified_name))

    def assignment(self) -> dict[int, HostAddress]:
        return {container: self._owner(container) for container in range(self.container_count)}

    def _owner(self, container: int) -> HostAddress:
        owner = self._owners.get(container)
        if owner is not None:
            return owner
        # Metadata segments name their container directly, which may lie beyond the count.
        return self._static_hosts[container % len(self._static_hosts)]

    def changed(self, table: str) -> None:
        """PgListener cluster-change callback: re-read when the map itself changed."""
        if table == _CONTAINER_MAP_TABLE:
            self._wake.set()

    def wake(self) -> None:
        """Re-read now (e.g. after the notification connection came back)."""
        self._wake.set()

    async def refresh(self) -> None:
        rows = await self._store.read_container_map()
        self._owners = {c: row.value for c, row in rows.items()}
        self.loaded.set()

    async def run(self) -> None:
        while True:
            # Cleared before the read, so a change committed while reading triggers another.
            self._wake.clear()
            try:
                await self.refresh()
            except StoreUnavailable as exc:
                _log.warning("cannot read the container map, answering from the last one: %s", exc)
            await wait_event(self._wake, self._poll_s)
