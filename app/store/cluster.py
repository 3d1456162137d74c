"""Cluster records in PostgreSQL (ClusterStore port): settings, members, leader, bucket owners.

Every write is conditional: settings and the leader record on their version, a member's
heartbeat on the version it last wrote, assignments on the versions the leader read, claims on
the row version and releases on the claimed generation, so no stale decision ever lands.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.cluster import (
    BucketCounts,
    BucketRow,
    BucketService,
    ClusterSettings,
    Fence,
    LeaderRecord,
    Member,
)
from app.domain.errors import IllegalState, WriteConflict
from app.store import queries
from app.store.db import Database

_SQL = queries.load("cluster")

MEMBER_APPLICATION_PREFIX = "pgc-member:"


class PgClusterStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def get_settings(self) -> ClusterSettings:
        row = await self._db.fetchrow(_SQL["get_settings"])
        if row is None:
            raise IllegalState("the cluster settings row is missing: is the schema migrated?")
        return ClusterSettings(
            BucketCounts(row["request_buckets"], row["retention_buckets"], row["watermark_buckets"]),
            row["container_count"],
            row["version"],
        )

    async def configure_settings(self, counts: BucketCounts, container_count: int) -> ClusterSettings:
        """Sets the counts if they differ and the cluster holds no stream yet; IllegalState when
        they differ from a cluster already in use (they are fixed for its life)."""
        current = await self.get_settings()
        if current.counts == counts and current.container_count == container_count:
            return current
        version = await self._db.fetchval(
            _SQL["configure_settings"],
            counts.requests,
            counts.retention,
            counts.watermarks,
            container_count,
            current.version,
        )
        if version is None:
            again = await self.get_settings()
            if again.counts == counts and again.container_count == container_count:
                return again
            if again.version != current.version:
                raise WriteConflict("the cluster settings changed meanwhile")
            raise IllegalState(
                f"this cluster already uses {again.counts} and {again.container_count} containers; "
                "bucket and container counts are fixed once streams exist"
            )
        return ClusterSettings(counts, container_count, int(version))

    async def ensure_buckets(self, service: BucketService, count: int) -> None:
        await self._db.execute(_SQL["ensure_buckets"], service.value, count)

    async def register_member(self, member: Member) -> int:
        version = await self._db.fetchval(
            _SQL["register_member"],
            member.id,
            member.host,
            member.grpc_port,
            member.rest_port,
            member.started_at,
        )
        return int(version)

    async def heartbeat(self, member_id: str, now_ms: int, expected_version: int) -> int | None:
        """The new version, or None when the row is gone or was written by someone else."""
        version = await self._db.fetchval(_SQL["heartbeat"], member_id, now_ms, expected_version)
        return None if version is None else int(version)

    async def members(self, now_ms: int, ttl_ms: int) -> list[tuple[Member, bool, int]]:
        """Every registered member with whether it is live and its row version."""
        rows = await self._db.fetch(_SQL["members"], now_ms, ttl_ms)
        return [
            (
                Member(
                    r["id"], r["host"], r["grpc_port"], r["rest_port"], r["started_at"], r["heartbeat_at"]
                ),
                bool(r["live"]),
                r["version"],
            )
            for r in rows
        ]

    async def remove_members(self, dead: Sequence[tuple[str, int]]) -> list[str]:
        if not dead:
            return []
        rows = await self._db.fetch(
            _SQL["remove_members"], [member_id for member_id, _ in dead], [version for _, version in dead]
        )
        return [r["id"] for r in rows]

    async def get_leader(self) -> LeaderRecord | None:
        row = await self._db.fetchrow(_SQL["get_leader"])
        return (
            None
            if row is None
            else LeaderRecord(row["controller_id"], row["term"], row["since"], row["version"])
        )

    async def set_leader(self, member_id: str, now_ms: int, expected_version: int | None) -> LeaderRecord:
        row = await self._db.fetchrow(_SQL["set_leader"], member_id, now_ms, expected_version)
        if row is None:
            raise WriteConflict("the leader record changed meanwhile")
        return LeaderRecord(member_id, row["term"], now_ms, row["version"])

    async def bucket_rows(self, service: BucketService | None = None) -> list[BucketRow]:
        if service is None:
            rows = await self._db.fetch(_SQL["all_bucket_rows"])
        else:
            rows = await self._db.fetch(_SQL["bucket_rows"], service.value)
        return [
            BucketRow(
                BucketService(r["service"]),
                r["bucket"],
                r["assigned_to"],
                r["owner"],
                r["generation"],
                r["version"],
            )
            for r in rows
        ]

    async def assign_buckets(self, service: BucketService, changes: Sequence[tuple[BucketRow, str]]) -> int:
        """Applies (row read, new assignee) pairs; returns how many landed (the rest conflicted)."""
        if not changes:
            return 0
        rows = await self._db.fetch(
            _SQL["assign_buckets"],
            service.value,
            [row.bucket for row, _ in changes],
            [assignee for _, assignee in changes],
            [row.version for row, _ in changes],
        )
        return len(rows)

    async def claim_bucket(self, row: BucketRow, owner: str, now_ms: int) -> Fence:
        claimed = await self._db.fetchrow(
            _SQL["claim_bucket"], row.service.value, row.bucket, owner, now_ms, row.version
        )
        if claimed is None:
            raise WriteConflict(f"{row.service} bucket {row.bucket} changed meanwhile")
        return Fence(row.service, row.bucket, claimed["generation"])

    async def release_bucket(self, fence: Fence, owner: str) -> bool:
        version = await self._db.fetchval(
            _SQL["release_bucket"], fence.service.value, fence.bucket, owner, fence.generation
        )
        return version is not None

    async def fence_holds(self, fence: Fence) -> bool:
        holds = await self._db.fetchval(
            _SQL["fence_holds"], fence.service.value, fence.bucket, fence.generation
        )
        return bool(holds)
