"""The segment-store hosts and the container map: which registered host owns each segment
container (the leader alone rewrites the map, whole, under version checks), and where a
segment's container lives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.domain.hosts import HostAddress
from app.domain.records import Versioned


class SegmentStoreLocator(Protocol):
    """Where a segment's container lives: answers getURI without touching storage."""

    def endpoint_for_segment(self, qualified_name: str) -> HostAddress: ...


@dataclass(frozen=True, slots=True)
class RegisteredHost:
    address: HostAddress
    registered_at: int
    version: int
    # The store's last heartbeat (ms); None for a host an operator registered, which never
    # heartbeats and never expires.
    heartbeat_at: int | None = None


class ContainerMapStore(Protocol):
    """Registered segment stores and the container -> host map the leader maintains."""

    async def register_host(self, host: HostAddress, now_ms: int, *, heartbeat: bool = False) -> bool:
        """Idempotent; True when the host was not registered before. `heartbeat`: the host
        heartbeats from now on (its first heartbeat is `now_ms`) and expires when it stops."""
        ...

    async def heartbeat_host(self, host: HostAddress, now_ms: int, expected_version: int) -> int | None:
        """The host's new version, or None when it is not registered at `expected_version`."""
        ...

    async def remove_hosts(self, hosts: list[tuple[HostAddress, int]]) -> list[HostAddress]:
        """Removes each host still at its version (host, version); returns those removed."""
        ...

    async def get_host(self, host: HostAddress) -> RegisteredHost:
        """Raises NotFound."""
        ...

    async def deregister_host(self, host: HostAddress, expected_version: int) -> None:
        """Conditional on the version; NotFound when the host is not registered."""
        ...

    async def list_hosts(self) -> list[RegisteredHost]:
        """Every registered host, in (host, port) order."""
        ...

    async def read_container_map(self) -> dict[int, Versioned[HostAddress]]:
        """Every stored container row with its version; empty before the first assignment."""
        ...

    async def replace_container_map(
        self, assignment: dict[int, HostAddress], expected: dict[int, int]
    ) -> None:
        """Makes the stored map equal `assignment` in one transaction, provided every row still
        has the version in `expected` (container -> version as read) and no row exists beyond
        those; otherwise nothing is written and WriteConflict is raised."""
        ...
