"""The cluster ports: settings, controller membership, leadership and bucket ownership (each
claim fenced by a generation), and the live controllers clients are told about."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.domain.cluster import (
    BucketCounts,
    BucketRow,
    BucketService,
    ClusterSettings,
    Fence,
    LeaderRecord,
    Member,
)
from app.domain.hosts import HostAddress


class ClusterView(Protocol):
    async def live_controllers(self) -> Sequence[HostAddress]: ...


class ClusterStore(Protocol):
    """Settings, membership, leadership and bucket ownership records (app/store/cluster.py)."""

    async def get_settings(self) -> ClusterSettings: ...

    async def configure_settings(self, counts: BucketCounts, container_count: int) -> ClusterSettings: ...

    async def ensure_buckets(self, service: BucketService, count: int) -> None: ...

    async def register_member(self, member: Member) -> int: ...

    async def heartbeat(self, member_id: str, now_ms: int, expected_version: int) -> int | None: ...

    async def members(self, now_ms: int, ttl_ms: int) -> list[tuple[Member, bool, int]]: ...

    async def remove_members(self, dead: Sequence[tuple[str, int]]) -> list[str]: ...

    async def get_leader(self) -> LeaderRecord | None: ...

    async def set_leader(self, member_id: str, now_ms: int, expected_version: int | None) -> LeaderRecord: ...

    async def bucket_rows(self, service: BucketService | None = None) -> list[BucketRow]: ...

    async def assign_buckets(
        self, service: BucketService, changes: Sequence[tuple[BucketRow, str]]
    ) -> int: ...

    async def claim_bucket(self, row: BucketRow, owner: str, now_ms: int) -> Fence: ...

    async def release_bucket(self, fence: Fence, owner: str) -> bool: ...

    async def fence_holds(self, fence: Fence) -> bool: ...
