"""Which segment containers this store serves: its share of the cluster's container map.

Invariant: a stream-segment request is served only when the last map this store read gives the
container of every segment it names (`requested_segments`) to it. Containers the map does not
name belong to the static hosts (host i of n owns {i, i+n, ...}), exactly as getURI answers for
them; before the first read, nothing is served. Every change reports the containers lost, so
their parked reads can be disowned.

Table-segment requests are served by any store (Java answers WrongHost for them too): a table
has no reads parked at its tail to wake and each operation is one PostgreSQL transaction, so any
store answers them correctly, while the Rust client (0.3.x) keeps a table segment's host for the
table's life and panics its reader group on a WrongHost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.domain.containers import container_for_segment
from app.ports import HostAddress
from app.segmentstore.wire import commands as wc

TABLE_REQUESTS: frozenset[type[wc.Command]] = frozenset(
    {
        wc.CreateTableSegment,
        wc.DeleteTableSegment,
        wc.GetTableSegmentInfo,
        wc.UpdateTableEntries,
        wc.RemoveTableKeys,
        wc.ReadTable,
        wc.ReadTableKeys,
        wc.ReadTableEntries,
        wc.ReadTableEntriesDelta,
    }
)


def requested_segments(cmd: wc.Command) -> tuple[str, ...]:
    """The stream segments a request acts on, every one of which this store must own to serve it:
    each segment the command's declaration names (`wc.segments_named`), so a merge's sources as
    well as its target (they share a container: transaction and transient segments hash with
    their parent; Java routes a merge by its source and finds the target in the same container).
    Empty for table-segment requests and for requests naming no segment (appends name their
    writer)."""
    if type(cmd) in TABLE_REQUESTS:
        return ()
    return wc.segments_named(cmd)


class ContainerOwnership:
    def __init__(self, me: HostAddress, container_count: int, static_hosts: Sequence[HostAddress]) -> None:
        if container_count <= 0:
            raise ValueError(f"the container count must be positive, got {container_count}")
        if not static_hosts:
            raise ValueError("at least one static segment-store host is needed")
        self.me = me
        self.container_count = container_count
        self._static = tuple(static_hosts)
        # Replaced whole, never mutated: a check sees one complete map or the next one.
        self._owners: Mapping[int, HostAddress] = {}
        self.loaded = False
        # How many times this store gained each container: a loss and a gain between two looks
        # (a store paused through both) still shows as a new acquisition.
        self._acquisitions: dict[int, int] = {}

    def container_of(self, segment: str) -> int:
        return container_for_segment(segment, self.container_count)

    def owns(self, segment: str) -> bool:
        return self.loaded and self.owner_of(self.container_of(segment)) == self.me

    def owner_of(self, container: int) -> HostAddress:
        owner = self._owners.get(container)
        if owner is not None:
            return owner
        # Metadata segments name their container directly, which may lie beyond the count.
        return self._static[container % len(self._static)]

    def owned(self) -> frozenset[int]:
        if not self.loaded:
            return frozenset()
        return frozenset(c for c in range(self.container_count) if self.owner_of(c) == self.me)

    def acquisitions(self) -> dict[int, int]:
        """Each owned container with the number of times this store has gained it."""
        return {c: self._acquisitions.get(c, 0) for c in self.owned()}

    def update(self, owners: Mapping[int, HostAddress]) -> tuple[frozenset[int], frozenset[int]]:
        """Takes a freshly read map; returns (gained, lost) containers."""
        before = self.owned()
        self._owners = dict(owners)
        self.loaded = True
        after = self.owned()
        for container in after - before:
            self._acquisitions[container] = self._acquisitions.get(container, 0) + 1
        return after - before, before - after

    def disown_all(self) -> frozenset[int]:
        """This store can no longer prove it is a member (its heartbeats fail): it serves
        nothing until a map read succeeds again. Returns the containers lost."""
        before = self.owned()
        self.loaded = False
        return before
