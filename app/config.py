"""Settings for `pgcontroller serve`, from flags with PGCONTROLLER_* environment fallbacks.

Defaults are Pravega's (gRPC 9090, REST 9091, 4 containers, a segment store on
localhost:12345) except that we bind to loopback unless told otherwise.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from app.domain.cluster import DEFAULT_COUNTS, BucketCounts
from app.domain.txns import DEFAULT_TXN_LIMITS, TxnLimits
from app.segmentstore.hosts import HostAddress

ENV_PREFIX = "PGCONTROLLER_"
MS_PER_HOUR = 3_600_000


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, kw_only=True)
class Settings:
    db_url: str | None = None
    data_dir: Path = Path(".pgcontroller")
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 9090
    rest_host: str = "127.0.0.1"
    rest_port: int = 9091
    instance_id: str = field(default_factory=default_instance_id)
    ready_file: Path | None = None
    log_level: str = "INFO"
    container_count: int = 4
    segment_store_hosts: tuple[HostAddress, ...] = (HostAddress("127.0.0.1", 12345),)
    shutdown_timeout_s: float = 5.0
    pool_max_size: int = 20
    request_concurrency: int = 64
    request_poll_s: float = 1.0
    completion_timeout_s: float = 120.0
    seal_busy_first_s: float = 0.1
    txn_min_lease_ms: int = DEFAULT_TXN_LIMITS.min_lease_ms
    txn_max_lease_ms: int = DEFAULT_TXN_LIMITS.max_lease_ms
    txn_max_execution_bound_ms: int = DEFAULT_TXN_LIMITS.max_execution_bound_ms
    txn_ttl_hours: int = DEFAULT_TXN_LIMITS.completed_ttl_ms // MS_PER_HOUR
    txn_timeout_grace_ms: int = DEFAULT_TXN_LIMITS.timeout_grace_ms
    request_buckets: int = DEFAULT_COUNTS.requests
    retention_buckets: int = DEFAULT_COUNTS.retention
    watermark_buckets: int = DEFAULT_COUNTS.watermarks
    member_ttl_s: float = 5.0
    rebalance_delay_s: float = 2.0
    container_rebalance_delay_s: float = 10.0
    cluster_interval_s: float = 0.5
    simulate_traffic: bool = False
    retention_frequency_ms: int = 30 * 60_000
    watermark_period_ms: int = 10_000
    traffic_report_period_s: float = 5.0
    advertise_host: str | None = None

    def __post_init__(self) -> None:
        for name in ("grpc_port", "rest_port"):
            port = getattr(self, name)
            if not 0 <= port < 65536:
                raise ValueError(f"{name.replace('_', '-')} must be 0..65535, got {port}")
        if self.container_count <= 0:
            raise ValueError(f"container-count must be positive, got {self.container_count}")
        if self.request_concurrency <= 0:
            raise ValueError(f"request-concurrency must be positive, got {self.request_concurrency}")
        if self.completion_timeout_s <= 0:
            raise ValueError(f"completion-timeout must be positive, got {self.completion_timeout_s:g}")
        if not self.segment_store_hosts:
            raise ValueError("at least one segment-store host is needed")
        if self.member_ttl_s <= 0:
            raise ValueError(f"member-ttl must be positive, got {self.member_ttl_s:g}")
        if self.container_rebalance_delay_s < 0:
            raise ValueError(
                f"container-rebalance-delay must not be negative, got {self.container_rebalance_delay_s:g}"
            )
        if self.watermark_period_ms <= 0:
            raise ValueError(f"watermark-period-ms must be positive, got {self.watermark_period_ms}")
        if self.retention_frequency_ms <= 0:
            raise ValueError(f"retention-frequency-ms must be positive, got {self.retention_frequency_ms}")
        if self.traffic_report_period_s <= 0:
            raise ValueError(f"traffic-report-period must be positive, got {self.traffic_report_period_s:g}")
        if self.rebalance_delay_s < 0:
            raise ValueError(f"rebalance-delay must not be negative, got {self.rebalance_delay_s:g}")
        # Built once here so that a bad value fails at start-up, not in a worker.
        self.bucket_counts  # noqa: B018
        self.txn_limits  # noqa: B018

    @property
    def bucket_counts(self) -> BucketCounts:
        return BucketCounts(self.request_buckets, self.retention_buckets, self.watermark_buckets)

    @property
    def txn_limits(self) -> TxnLimits:
        return TxnLimits(
            min_lease_ms=self.txn_min_lease_ms,
            max_lease_ms=self.txn_max_lease_ms,
            max_execution_bound_ms=self.txn_max_execution_bound_ms,
            completed_ttl_ms=self.txn_ttl_hours * MS_PER_HOUR,
            timeout_grace_ms=self.txn_timeout_grace_ms,
        )

    def advertised_host(self) -> str:
        if self.advertise_host:
            return self.advertise_host
        if self.grpc_host in ("", "0.0.0.0", "::"):
            return socket.gethostname()
        return self.grpc_host


def parse_hosts(text: str) -> tuple[HostAddress, ...]:
    return tuple(HostAddress.parse(part) for part in text.split(",") if part.strip())
