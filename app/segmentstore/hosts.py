"""Container -> segment-store host map for getURI, from a configured host list.

Host i of n owns containers {i, i+n, i+2n, ...}: Pravega's initial uniform assignment. The
cluster issue replaces the static list with a leader-maintained map; this stays its seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.containers import container_for_segment
from app.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class HostAddress:
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> HostAddress:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInput(f"segment-store host must look like HOST:PORT, got {text!r}")
        return HostAddress(host.strip("[]"), int(port))


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

    def endpoint_for_segment(self, qualified_name: str) -> tuple[str, int]:
        owner = self._owners[self.container_for(qualified_name)]
        return owner.host, owner.port

    def assignment(self) -> dict[int, HostAddress]:
        return dict(self._owners)
