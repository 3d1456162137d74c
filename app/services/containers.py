"""The segment-container -> segment-store map (Pravega's host-container map): host registration,
the effective assignment getURI answers from, and the leader's rebalance step.

Invariant: every answer assigns each container 0..n-1 exactly one host. With no segment store
registered, the stored map is empty and the configured static hosts own the containers (host i
of n gets {i, i+n, ...}), so a fresh cluster answers getURI before any leader has acted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.domain.cluster import balance
from app.domain.errors import InvalidInput
from app.ports import Clock, ContainerMapStore, HostAddress, RegisteredHost

MAX_HOST_LENGTH = 255
MAX_PORT = 65535
MAX_CONTAINERS = 2**31 - 1


def host_address(host: str, port: int) -> HostAddress:
    """A validated endpoint. A host carries no whitespace or '/' (it is a path segment of the
    REST API and a client connects to it verbatim)."""
    if not host or len(host) > MAX_HOST_LENGTH:
        raise InvalidInput(f"host must be 1 to {MAX_HOST_LENGTH} characters, got {len(host)}")
    if "/" in host or any(ch.isspace() for ch in host) or not host.isprintable():
        raise InvalidInput(f"host must not contain '/', whitespace or control characters, got {host!r}")
    if isinstance(port, bool) or not 0 < port <= MAX_PORT:
        raise InvalidInput(f"port must be between 1 and {MAX_PORT}, got {port}")
    return HostAddress(host, port)


def uniform(container_count: int, hosts: Sequence[HostAddress]) -> dict[int, HostAddress]:
    """Host i of n owns containers {i, i+n, ...}, hosts taken in the order given."""
    return {container: hosts[container % len(hosts)] for container in range(container_count)}


@dataclass(frozen=True, slots=True)
class ContainerAssignment:
    container_count: int
    owners: dict[int, HostAddress]  # every container 0..count-1
    from_static_hosts: bool  # no stored map (no segment store registered): the configured hosts


class RebalanceAction(StrEnum):
    KEPT = "kept"  # the stored map already fits the host set: nothing written
    REBALANCED = "rebalanced"  # a new map was written


@dataclass(frozen=True, slots=True)
class Rebalance:
    action: RebalanceAction
    hosts: tuple[HostAddress, ...]  # the registered hosts the map was computed over
    assignment: dict[int, HostAddress]  # the stored map now; empty = the static hosts answer
    moved: tuple[int, ...]  # containers whose host changed (assigned, moved or unassigned)


class ContainerMapService:
    def __init__(
        self,
        store: ContainerMapStore,
        clock: Clock,
        container_count: int,
        static_hosts: Sequence[HostAddress],
    ) -> None:
        if not 0 < container_count <= MAX_CONTAINERS:
            raise InvalidInput(f"the container count must be positive, got {container_count}")
        if not static_hosts:
            raise InvalidInput("at least one static segment-store host is needed")
        self._store = store
        self._clock = clock
        self.container_count = container_count
        self.static_hosts = tuple(static_hosts)

    async def register_host(self, host: str, port: int) -> tuple[RegisteredHost, bool]:
        """Idempotent: the host as registered, and whether this call registered it."""
        address = host_address(host, port)
        created = await self._store.register_host(address, self._clock.now_ms())
        return await self._store.get_host(address), created

    async def expire_hosts(self, expiry_ms: int) -> list[HostAddress]:
        """Removes every heartbeating host whose last heartbeat is older than `expiry_ms` (each
        at the version it was judged by, so a heartbeat landing meanwhile keeps it); returns the
        hosts removed. Hosts an operator registered never heartbeat and never expire."""
        now = self._clock.now_ms()
        stale = [
            (registered.address, registered.version)
            for registered in await self._store.list_hosts()
            if registered.heartbeat_at is not None and now - registered.heartbeat_at > expiry_ms
        ]
        return await self._store.remove_hosts(stale)

    async def deregister_host(self, host: str, port: int) -> None:
        """NotFound for a host that is not registered. Its containers stay with it until the
        leader's next rebalance moves them (at its next pass: a departure is not delayed)."""
        address = host_address(host, port)
        registered = await self._store.get_host(address)
        await self._store.deregister_host(address, registered.version)

    async def hosts(self) -> list[RegisteredHost]:
        return await self._store.list_hosts()

    async def assignment(self) -> ContainerAssignment:
        """The map getURI answers from: the stored map, else the static hosts."""
        stored = await self._store.read_container_map()
        static = uniform(self.container_count, self.static_hosts)
        owners = {c: stored[c].value if c in stored else static[c] for c in range(self.container_count)}
        return ContainerAssignment(self.container_count, owners, from_static_hosts=not stored)

    async def rebalance(self, hosts: Sequence[HostAddress] | None = None) -> Rebalance:
        """One rebalance over `hosts` (default: the registered ones), without any delay: the
        caller decides when the host set has settled. Keeps the map when it still fits; the
        first map or a single host gets the uniform assignment, any other change Pravega's
        UniformContainerBalancer (departed hosts' containers to the least loaded, then spread
        at most one). No hosts at all empties the map, handing getURI to the static hosts.
        Raises WriteConflict when the map changed since it was read (nothing is written)."""
        if hosts is None:
            hosts = [registered.address for registered in await self._store.list_hosts()]
        members = tuple(sorted(set(hosts)))
        stored = await self._store.read_container_map()
        current = {container: row.value for container, row in stored.items()}
        target = self._target(current, members)
        if target == current:
            return Rebalance(RebalanceAction.KEPT, members, current, ())
        await self._store.replace_container_map(target, {c: row.version for c, row in stored.items()})
        moved = tuple(sorted(c for c in target.keys() | current.keys() if target.get(c) != current.get(c)))
        return Rebalance(RebalanceAction.REBALANCED, members, target, moved)

    def _target(
        self, current: dict[int, HostAddress], members: tuple[HostAddress, ...]
    ) -> dict[int, HostAddress]:
        if not members:
            return {}
        containers = list(range(self.container_count))
        if set(current) == set(containers) and set(current.values()) == set(members):
            return current
        by_name = {str(member): member for member in members}
        named = {c: str(host) for c, host in current.items() if c < self.container_count}
        balanced = balance(containers, named, list(by_name))
        return {c: by_name[name] for c, name in balanced.items()}
