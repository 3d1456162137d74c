"""Every metric the controller publishes, declared once: its Prometheus name, kind, labels, help and
the Pravega metric it stands for ("" for the ones our design adds). docs/operations.md's table is
this table (a test keeps them equal); counters end in `_total`, latencies are seconds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricDef:
    name: str  # as scraped, without a counter's `_total` (prometheus-client adds it)
    kind: Kind
    help: str
    pravega: str = ""  # Pravega's name (MetricsNames), "" when the metric is ours
    labels: tuple[str, ...] = ()

    @property
    def exposed(self) -> str:
        return f"{self.name}_total" if self.kind is Kind.COUNTER else self.name


_P = "pravega_controller_"


def _operation(noun: str, done: str, fail: str, what: str, pravega: bool = True) -> list[MetricDef]:
    """Pravega's triple for one operation: a success counter, a failure counter, a latency."""
    java = f"pravega.controller.{noun}"

    def named(suffix: str) -> str:
        return f"{java}.{suffix}" if pravega else ""

    return [
        MetricDef(f"{_P}{noun}_{done}", Kind.COUNTER, f"{what}: successes", named(done)),
        MetricDef(f"{_P}{noun}_{fail}", Kind.COUNTER, f"{what}: failures", named(fail)),
        MetricDef(
            f"{_P}{noun}_{done}_latency_seconds",
            Kind.HISTOGRAM,
            f"{what}: latency of the successful calls, seconds",
            named(f"{done}_latency_ms"),
        ),
    ]


def _txn(done: str, fail: str, what: str) -> list[MetricDef]:
    return _operation("transactions", done, fail, what)


def _latency(what: str, help_: str) -> MetricDef:
    """A latency Pravega keeps on its own (`<what>_latency_ms`), of successful runs only."""
    return MetricDef(
        f"{_P}{what}_latency_seconds",
        Kind.HISTOGRAM,
        f"{help_}: latency of the successful runs, seconds",
        f"pravega.controller.{what.replace('_', '.', 1)}_latency_ms",
    )


DEFINITIONS: tuple[MetricDef, ...] = (
    *_operation("scope", "created", "create_failed", "createScope"),
    *_operation("scope", "deleted", "delete_failed", "deleteScope"),
    MetricDef(
        f"{_P}scope_recursive_delete_failed",
        Kind.COUNTER,
        "deleteScopeRecursive: failures",
        "pravega.controller.scope.recursive_delete_failed",
    ),
    *_operation("stream", "created", "create_failed", "createStream"),
    *_operation("stream", "sealed", "seal_failed", "sealStream"),
    *_operation("stream", "deleted", "delete_failed", "deleteStream"),
    *_operation("stream", "updated", "update_failed", "updateStream"),
    *_operation("stream", "truncated", "truncate_failed", "truncateStream"),
    *_operation("stream", "scaled", "scale_failed", "scale (manual and automatic)", pravega=False),
    *_operation("stream", "create_reader_group", "create_reader_group_failed", "createReaderGroup"),
    *_operation("stream", "update_reader_group", "update_reader_group_failed", "updateReaderGroup"),
    *_operation("stream", "delete_reader_group", "delete_reader_group_failed", "deleteReaderGroup"),
    *_operation(
        "stream",
        "update_subscriber_streamcut",
        "update_subscriber_streamcut_failed",
        "updateSubscriberStreamCut",
    ),
    *_operation("kvtable", "created", "create_failed", "createKeyValueTable"),
    *_operation("kvtable", "deleted", "delete_failed", "deleteKeyValueTable"),
    MetricDef(
        f"{_P}kvtable_segments_count",
        Kind.GAUGE,
        "segments of all active key-value tables (Pravega's is per table)",
        "pravega.controller.kvtable.segments.count",
    ),
    *_txn("created", "create_failed", "createTransaction"),
    *_txn("committed", "commit_failed", "commitTransaction"),
    *_txn("aborted", "abort_failed", "abortTransaction"),
    # Pravega's finer transaction latencies: the segment store's part of each step, and the
    # commit/abort calls themselves (the decision recorded, the work queued).
    _latency(
        "transactions_created_segments",
        "createTransaction: creating the transaction's segments in the segment stores",
    ),
    _latency("transactions_committing", "commitTransaction: marking the transaction COMMITTING"),
    _latency(
        "transactions_committed_segments",
        "commit worker: merging a batch's transaction segments into the stream's segments",
    ),
    _latency("transactions_aborting", "abortTransaction: marking the transaction ABORTING"),
    _latency(
        "transactions_aborted_segments",
        "abort worker: dropping the transaction's segments in the segment stores",
    ),
    MetricDef(
        f"{_P}transactions_opened",
        Kind.GAUGE,
        "transactions open now",
        "pravega.controller.transactions.opened",
    ),
    MetricDef(
        f"{_P}transactions_timedout",
        Kind.COUNTER,
        "transactions aborted because their lease ran out",
        "pravega.controller.transactions.timedout",
    ),
    MetricDef(f"{_P}hosts_count", Kind.GAUGE, "segment stores known", "pravega.controller.hosts.count"),
    MetricDef(
        f"{_P}hosts_container_count",
        Kind.GAUGE,
        "segment containers each segment store owns",
        "pravega.controller.hosts.container_count",
        labels=("host",),
    ),
    MetricDef(
        f"{_P}hosts_failures",
        Kind.COUNTER,
        "segment stores removed for missing heartbeats",
        "pravega.controller.hosts.failures",
    ),
    MetricDef(
        f"{_P}container_failovers",
        Kind.COUNTER,
        "segment containers moved off a segment store that left",
        "pravega.controller.container.failovers",
    ),
    MetricDef(
        f"{_P}segments_count",
        Kind.GAUGE,
        "active segments of all streams",
        "pravega.controller.segments.count",
    ),
    MetricDef(
        f"{_P}segment_splits",
        Kind.GAUGE,
        "splits in the history of all streams (Pravega's is per stream)",
        "pravega.controller.segment.splits",
    ),
    MetricDef(
        f"{_P}segment_merges",
        Kind.GAUGE,
        "merges in the history of all streams (Pravega's is per stream)",
        "pravega.controller.segment.merges",
    ),
    MetricDef(
        f"{_P}retention_frequency",
        Kind.COUNTER,
        "truncations made by the retention worker",
        "pravega.controller.retention.frequency",
    ),
    MetricDef(
        f"{_P}retention_truncated_size",
        Kind.GAUGE,
        "bytes before the truncation point, summed over all streams (Pravega's is per stream)",
        "pravega.controller.retention.truncated_size",
    ),
    # Ours: the API's own latency, by method and answer.
    MetricDef(
        "pgcontroller_grpc_request_duration_seconds",
        Kind.HISTOGRAM,
        "gRPC calls by method and status, seconds",
        labels=("method", "status"),
    ),
    MetricDef(
        "pgcontroller_rest_request_duration_seconds",
        Kind.HISTOGRAM,
        "REST calls by method, route and status, seconds",
        labels=("method", "route", "status"),
    ),
    # Ours: the design's moving parts.
    MetricDef("pgcontroller_streams", Kind.GAUGE, "streams in the cluster"),
    MetricDef("pgcontroller_scopes", Kind.GAUGE, "scopes in the cluster"),
    MetricDef(
        "pgcontroller_request_queue_depth",
        Kind.GAUGE,
        "queued workflow requests by processor",
        labels=("processor",),
    ),
    MetricDef(
        "pgcontroller_request_queue_oldest_age_seconds",
        Kind.GAUGE,
        "age of the oldest queued request by processor, seconds",
        labels=("processor",),
    ),
    MetricDef("pgcontroller_parked_requests", Kind.GAUGE, "requests parked for an operator"),
    MetricDef(
        "pgcontroller_workflow_step_duration_seconds",
        Kind.HISTOGRAM,
        "workflow steps (one handler run of a queued request) by processor, kind and result, seconds",
        labels=("processor", "kind", "result"),
    ),
    MetricDef(
        "pgcontroller_buckets_owned", Kind.GAUGE, "buckets this process owns, by service", labels=("service",)
    ),
    MetricDef(
        "pgcontroller_cache_requests",
        Kind.COUNTER,
        "cache look-ups by cache and result",
        labels=("cache", "result"),
    ),
    MetricDef("pgcontroller_db_pool_size", Kind.GAUGE, "connections of the database pool"),
    MetricDef("pgcontroller_db_pool_idle", Kind.GAUGE, "idle connections of the database pool"),
    MetricDef("pgcontroller_db_pool_max", Kind.GAUGE, "the database pool's upper bound"),
    MetricDef("pgcontroller_listen_connected", Kind.GAUGE, "1 while the LISTEN connection is up, else 0"),
    MetricDef(
        "pgcontroller_segmentstore_appends",
        Kind.COUNTER,
        "events appended by segment store",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_append_bytes",
        Kind.COUNTER,
        "bytes appended by segment store",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_reads",
        Kind.COUNTER,
        "segment reads served by segment store",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_read_bytes",
        Kind.COUNTER,
        "bytes read by segment store",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_db_reads",
        Kind.COUNTER,
        "segment reads a segment store sent to PostgreSQL",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_cached_reads",
        Kind.COUNTER,
        "segment reads a segment store answered from its read index, in memory",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_segmentstore_read_ahead_reads",
        Kind.COUNTER,
        "segment reads a segment store answered with a range it had read from PostgreSQL ahead of the "
        "reader (counted in db_reads too)",
        labels=("store",),
    ),
    MetricDef(
        "pgcontroller_tier_postgres_bytes",
        Kind.GAUGE,
        "bytes of stream segments held in PostgreSQL, by container (long-term tier on)",
        labels=("container",),
    ),
    MetricDef(
        "pgcontroller_tier_tiered_bytes",
        Kind.GAUGE,
        "bytes of stream segments held in the long-term tier, by container",
        labels=("container",),
    ),
    MetricDef(
        "pgcontroller_tier_due_bytes",
        Kind.GAUGE,
        "bytes in PostgreSQL the storage writer should have moved (the flush lag in bytes), by container",
        labels=("container",),
    ),
    MetricDef(
        "pgcontroller_tier_lag_seconds",
        Kind.GAUGE,
        "seconds since the storage writer last found nothing due in the container (the flush lag)",
        labels=("container",),
    ),
    MetricDef(
        "pgcontroller_tier_garbage_objects", Kind.GAUGE, "objects waiting for the collector (the GC backlog)"
    ),
    MetricDef("pgcontroller_tier_chunks_written", Kind.COUNTER, "chunk objects the storage writer recorded"),
    MetricDef(
        "pgcontroller_tier_bytes_moved", Kind.COUNTER, "bytes the storage writer moved out of PostgreSQL"
    ),
    MetricDef("pgcontroller_tier_objects_deleted", Kind.COUNTER, "objects the collector deleted"),
    MetricDef(
        "pgcontroller_tier_appends_delayed",
        Kind.COUNTER,
        "appends that waited because their container had more than --tier-throttle-bytes due to move",
    ),
)

BY_NAME: dict[str, MetricDef] = {d.name: d for d in DEFINITIONS}
