"""Read-only views of the cluster for the APIs: members (and the live controllers the
ClusterView port lists), bucket assignments, the leader, and what this process itself holds.
Decisions are made by the cluster loop, never here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.domain.cluster import BucketRow, BucketService, LeaderRecord, Member
from app.ports import Clock, ClusterStore, HostAddress


@dataclass(frozen=True, slots=True)
class LocalView:
    member_id: str
    leader: bool
    owned: Mapping[BucketService, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberView:
    member: Member
    live: bool


class ClusterQueries:
    def __init__(
        self, store: ClusterStore, clock: Clock, member_ttl_ms: int, local: Callable[[], LocalView]
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl_ms = member_ttl_ms
        self._local = local

    async def members(self) -> list[MemberView]:
        rows = await self._store.members(self._clock.now_ms(), self._ttl_ms)
        return [MemberView(member, live) for member, live, _ in rows]

    async def live_controllers(self) -> list[HostAddress]:
        """The ClusterView port: live members that advertise a gRPC endpoint."""
        return [
            HostAddress(view.member.host, view.member.grpc_port)
            for view in await self.members()
            if view.live and view.member.grpc_port
        ]

    async def buckets(self, service: BucketService | None = None) -> list[BucketRow]:
        return await self._store.bucket_rows(service)

    async def bucket_mapping(self, service: BucketService) -> dict[str, list[int]]:
        """Controller id -> the buckets the leader assigned it (Pravega's
        getControllerToBucketMapping); unassigned buckets appear under no controller."""
        mapping: dict[str, list[int]] = {}
        for row in await self._store.bucket_rows(service):
            if row.assigned_to is not None:
                mapping.setdefault(row.assigned_to, []).append(row.bucket)
        return mapping

    async def leader(self) -> LeaderRecord | None:
        return await self._store.get_leader()

    def local(self) -> LocalView:
        return self._local()
