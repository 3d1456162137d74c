"""The cluster's vocabulary: bucket services, fences, the stream-to-bucket rule and the
uniform balancer that spreads buckets over controllers and containers over segment stores.

Invariant: every process computes the same bucket for a stream and the same balanced
assignment from the same inputs, so ownership decisions never depend on who computes them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from app.domain.containers import java_string_hash
from app.domain.errors import InvalidInput


class BucketService(StrEnum):
    """The kinds of bucketed work; each has its own bucket count and owners."""

    REQUESTS = "requests"
    RETENTION = "retention"
    WATERMARKS = "watermarks"


# Pravega's defaults for retention (1) and watermarking (100) bucket counts. Requests have
# no Pravega counterpart (its request streams are read by a reader group); 16 spreads the
# request work of a few processes evenly.
DEFAULT_BUCKET_COUNTS: Mapping[BucketService, int] = {
    BucketService.REQUESTS: 16,
    BucketService.RETENTION: 1,
    BucketService.WATERMARKS: 100,
}
MAX_BUCKETS = 4096


@dataclass(frozen=True, slots=True)
class BucketCounts:
    requests: int
    retention: int
    watermarks: int

    def __post_init__(self) -> None:
        for service in BucketService:
            count = self.of(service)
            if not 0 < count <= MAX_BUCKETS:
                raise InvalidInput(f"{service} bucket count must be within 1..{MAX_BUCKETS}, got {count}")

    def of(self, service: BucketService) -> int:
        count: int = getattr(self, service.value)
        return count


DEFAULT_COUNTS = BucketCounts(
    requests=DEFAULT_BUCKET_COUNTS[BucketService.REQUESTS],
    retention=DEFAULT_BUCKET_COUNTS[BucketService.RETENTION],
    watermarks=DEFAULT_BUCKET_COUNTS[BucketService.WATERMARKS],
)


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof of ownership a writer carries: a write conditioned on it fails once the bucket
    has been claimed again (its generation moved on), so a late writer cannot land."""

    service: BucketService
    bucket: int
    generation: int


def stream_name_hash(scope: str, stream: str) -> int:
    """Java's `"scope/stream".hashCode()`; the database computes the same (pgc_java_hash)."""
    return java_string_hash(f"{scope}/{stream}")


def stream_bucket(scope: str, stream: str, count: int) -> int:
    """Pravega's BucketStore rule: `(hashCode & 0x7fffffff) % count`, over "scope/stream"."""
    return (stream_name_hash(scope, stream) & 0x7FFFFFFF) % count


Key = TypeVar("Key", bound=Hashable)


def balance(
    keys: Sequence[Key], current: Mapping[Key, str], members: Sequence[str], *, spread: bool = True
) -> dict[Key, str]:
    """Pravega's UniformContainerBalancer, used for segment containers and for buckets, as Pravega does.

    First map, or a single member: member i of n (in sorted order) gets keys {i, i+n, ...}.
    Otherwise keys of departed members go one at a time to the least loaded member, then keys
    move from the most to the least loaded until the spread is at most one. Ties go to the
    smaller member; Java breaks them by host hash, which no client can observe.
    With `spread=False` only orphaned keys move (used while membership is still settling).
    """
    ordered = sorted(set(members))
    if not ordered:
        return {}
    live = set(ordered)
    wanted = set(keys)
    kept = {key: owner for key, owner in current.items() if key in wanted and owner in live}
    if not kept or len(ordered) == 1:
        return {key: ordered[index % len(ordered)] for index, key in enumerate(keys)}
    load: dict[str, list[Key]] = {member: [] for member in ordered}
    orphans: list[Key] = []
    for key in keys:
        owner = kept.get(key)
        if owner is None:
            orphans.append(key)
        else:
            load[owner].append(key)
    for key in orphans:
        least = min(ordered, key=lambda member: (len(load[member]), member))
        load[least].append(key)
    while spread:
        most = max(ordered, key=lambda member: (len(load[member]), member))
        least = min(ordered, key=lambda member: (len(load[member]), member))
        if len(load[most]) - len(load[least]) <= 1:
            break
        load[least].append(load[most].pop())
    return {key: member for member, owned in load.items() for key in owned}


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    counts: BucketCounts
    container_count: int
    version: int


@dataclass(frozen=True, slots=True)
class Member:
    """A live (or recently live) controller process."""

    id: str
    host: str
    grpc_port: int
    rest_port: int
    started_at: int
    heartbeat_at: int


@dataclass(frozen=True, slots=True)
class BucketRow:
    service: BucketService
    bucket: int
    assigned_to: str | None
    owner: str | None
    generation: int
    version: int


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    controller_id: str
    term: int
    since: int
    version: int
