"""The part of the analysts' contract (sql/reporting/README.md) the pipeline reads, and the
normalized names spark.facts uses for it. The only module that knows view and column names.

Every event view is read by stream id (partition column) and filtered by its event time in ms
since the Unix epoch (time column): the time its facts are dated by.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    name: str
    view: str
    # normalized name -> SQL expression over the view (a plain column keeps predicates indexable)
    columns: dict[str, str] = field(default_factory=dict)
    time_column: str | None = None  # None: read whole (one row per stream)
    partition_column: str = "stream_id"

    def select_list(self) -> tuple[str, ...]:
        return tuple(expr if expr == name else f"{expr} AS {name}" for name, expr in self.columns.items())


STREAMS = Source(
    "streams", "reporting.streams", {"stream_id": "stream_id", "scope": "scope", "stream": "stream"}
)

# One row per epoch >= 1; kind is split, merge, rolling (either epoch a rolling transaction
# writes) or other; splits/merges are how many of each the epoch's scale performed.
SCALE_EVENTS = Source(
    "scale_events",
    "reporting.scale_events",
    {
        "stream_id": "stream_id",
        "time_ms": "event_time",
        "epoch": "epoch",
        "kind": "kind",
        "splits": "splits",
        "merges": "merges",
        "sealed_count": "sealed_count",
        "created_count": "created_count",
        "segment_count": "segments_after",
    },
    time_column="event_time",
)

# Sealed segments are dated by the creation time of the epoch that sealed them.
SEGMENTS = Source(
    "segments",
    "reporting.segments",
    {"stream_id": "stream_id", "sealed_ms": "sealed_time", "sealed_size": "sealed_size_bytes"},
    time_column="sealed_time",
)

# Completed transactions only (the time column is NULL for active ones); the latency is from
# the commit request to the completion, NULL where the controller kept no details.
TRANSACTIONS = Source(
    "transactions",
    "reporting.transactions",
    {
        "stream_id": "stream_id",
        "time_ms": "completion_time",
        "outcome": "outcome",
        "latency_ms": "commit_latency_ms",
    },
    time_column="completion_time",
)

# One row per completed truncation, never changed: the bytes and segments that truncation
# removed are dated by its completion. Rows of truncations completed before the controller kept
# this history are one per stream, dated at that upgrade (sql/reporting/README.md).
TRUNCATION_HISTORY = Source(
    "truncation_history",
    "reporting.truncation_history",
    {
        "stream_id": "stream_id",
        "time_ms": "completion_time",
        "truncated_bytes": "truncated_bytes",
        "deleted_count": "deleted_count",
    },
    time_column="completion_time",
)

EVENT_SOURCES = (SCALE_EVENTS, SEGMENTS, TRANSACTIONS, TRUNCATION_HISTORY)

# Whether anything is newer than a high-water mark is asked of these (indexed time columns);
# a segment is sealed by a new epoch, so `segments` has nothing they would not show.
PROBED_SOURCES = (SCALE_EVENTS, TRANSACTIONS, TRUNCATION_HISTORY)

# Every segment of a stream with the epochs that created and sealed it, and when (an epoch's
# creation time): the clock a stream's events lack, for the event-throughput charts. Read whole
# per chart stream (a `stream_id` look-up), not by time.
SEGMENT_LIVES = Source(
    "segment_lives",
    "reporting.segments",
    {
        "stream_id": "stream_id",
        "segment_id": "segment_id",
        "creation_epoch": "creation_epoch",
        "creation_ms": "creation_time",
        "sealed_epoch": "sealed_epoch",
        "sealed_ms": "sealed_time",
    },
)
