"""Per-stream per-day facts from the rows of the reporting views: pure DataFrame transforms.

Input frames use the normalized column names of `spark.sources` (whatever the views call
them); days are UTC calendar days of the event time in milliseconds. A (stream, day) has a
fact row when anything happened to the stream that day. Every figure of a day is computed
from all of that day's rows, never added to an earlier partial figure, so recomputing a day
replaces it exactly (the incremental rule relies on this).
"""

from __future__ import annotations

import hashlib

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))

# Column, type, meaning: the lake's and the marts' schema (marts.py derives its DDL from it).
STREAM_DAILY: tuple[tuple[str, T.DataType, str], ...] = (
    ("date", T.DateType(), "UTC calendar day"),
    ("stream_id", T.LongType(), "the stream's id (reporting.streams)"),
    ("scope", T.StringType(), "scope name"),
    ("stream", T.StringType(), "stream name"),
    ("epochs_created", T.LongType(), "epochs created that day: scales plus rolling-transaction epochs"),
    ("scales", T.LongType(), "scale events (epochs not written by a rolling transaction)"),
    ("splits", T.LongType(), "splits those scales performed"),
    ("merges", T.LongType(), "merges those scales performed"),
    ("rolling_epochs", T.LongType(), "epochs written by rolling transactions (two per rolling transaction)"),
    ("segments_created", T.LongType(), "segments created by that day's epochs"),
    ("segments_sealed", T.LongType(), "segments sealed by that day's epochs"),
    ("epoch_end", T.LongType(), "highest epoch created that day (null: none)"),
    ("segment_count_end", T.LongType(), "segments of that epoch (null: no epoch that day)"),
    ("bytes_sealed", T.LongType(), "sealed sizes of the segments sealed that day, bytes"),
    ("bytes_truncated", T.LongType(), "bytes removed by the truncations completed that day"),
    ("truncations", T.LongType(), "truncations completed that day"),
    ("segments_deleted", T.LongType(), "segments those truncations deleted"),
    ("txn_committed", T.LongType(), "transactions committed that day"),
    ("txn_aborted", T.LongType(), "transactions aborted that day"),
    ("commit_latency_p50_ms", T.DoubleType(), "median commit latency of that day's commits, ms"),
    ("commit_latency_p90_ms", T.DoubleType(), "90th percentile commit latency, ms"),
    ("commit_latency_p99_ms", T.DoubleType(), "99th percentile commit latency, ms"),
    ("commit_latency_max_ms", T.LongType(), "longest commit latency, ms"),
)

COUNTS = (
    "epochs_created",
    "scales",
    "splits",
    "merges",
    "rolling_epochs",
    "segments_created",
    "segments_sealed",
    "bytes_sealed",
    "bytes_truncated",
    "truncations",
    "segments_deleted",
    "txn_committed",
    "txn_aborted",
)

DAILY: tuple[tuple[str, T.DataType, str], ...] = (
    ("date", T.DateType(), "UTC calendar day"),
    ("streams_active", T.LongType(), "streams with a fact row that day"),
    *((name, T.LongType(), "the per-stream figure summed over streams") for name in COUNTS),
    ("commit_latency_p50_ms", T.DoubleType(), "median over every commit of the day (all streams), ms"),
    ("commit_latency_p90_ms", T.DoubleType(), "90th percentile over every commit of the day, ms"),
    ("commit_latency_p99_ms", T.DoubleType(), "99th percentile over every commit of the day, ms"),
    ("commit_latency_max_ms", T.LongType(), "longest commit of the day, ms"),
)


def _facts_version() -> str:
    columns = ",".join(f"{name} {kind.simpleString()}" for name, kind, _ in (*STREAM_DAILY, *DAILY))
    return f"{_REVISION}:{hashlib.sha256(columns.encode()).hexdigest()[:12]}"


# Which definitions computed a lake's and the marts' facts (recorded with every run): the
# columns, and a revision to bump when a figure changes meaning without a column changing.
# A lake whose last run had another version is recomputed whole: mixing days computed by two
# definitions would make sums over days meaningless.
# Revision 2: truncations read from reporting.truncation_history (1 observed them between runs).
_REVISION = 2
FACTS_VERSION = _facts_version()


def utc_day(millis: Column) -> Column:
    return F.to_date(F.timestamp_millis(millis))


def _sum_long(col: Column) -> Column:
    return F.coalesce(F.sum(col), F.lit(0)).cast("long")


def _count_if(condition: Column) -> Column:
    return _sum_long(F.when(condition, 1).otherwise(0))


def _stats(source: str, time_column: str) -> list[Column]:
    """What a run learns about its own read per group: rows and the newest event time."""
    return [
        F.count(F.lit(1)).cast("long").alias(f"_rows_{source}"),
        F.max(time_column).cast("long").alias(f"_last_{source}"),
    ]


def scale_facts(scale_events: DataFrame) -> DataFrame:
    rolling = F.col("kind") == "rolling"
    return (
        scale_events.withColumn("date", utc_day(F.col("time_ms")))
        .groupBy("stream_id", "date")
        .agg(
            F.count(F.lit(1)).cast("long").alias("epochs_created"),
            _count_if(~rolling).alias("scales"),
            _sum_long(F.col("splits")).alias("splits"),
            _sum_long(F.col("merges")).alias("merges"),
            _count_if(rolling).alias("rolling_epochs"),
            _sum_long(F.col("created_count")).alias("segments_created"),
            _sum_long(F.col("sealed_count")).alias("segments_sealed"),
            F.max("epoch").cast("long").alias("epoch_end"),
            F.max_by("segment_count", "epoch").cast("long").alias("segment_count_end"),
            *_stats("scale", "time_ms"),
        )
    )


def sealed_facts(segments: DataFrame) -> DataFrame:
    return (
        segments.where(F.col("sealed_ms").isNotNull())
        .withColumn("date", utc_day(F.col("sealed_ms")))
        .groupBy("stream_id", "date")
        .agg(_sum_long(F.col("sealed_size")).alias("bytes_sealed"), *_stats("sealed", "sealed_ms"))
    )


def truncation_facts(history: DataFrame) -> DataFrame:
    return (
        history.withColumn("date", utc_day(F.col("time_ms")))
        .groupBy("stream_id", "date")
        .agg(
            _sum_long(F.col("truncated_bytes")).alias("bytes_truncated"),
            F.count(F.lit(1)).cast("long").alias("truncations"),
            _sum_long(F.col("deleted_count")).alias("segments_deleted"),
            *_stats("trunc", "time_ms"),
        )
    )


def _latency_aggs() -> list[Column]:
    # Exact, interpolated percentiles: the same figures as PostgreSQL's percentile_cont.
    committed_latency = F.when(F.col("outcome") == "COMMITTED", F.col("latency_ms"))
    aggs = [
        F.percentile(committed_latency, value).alias(f"commit_latency_{name}_ms")
        for name, value in PERCENTILES
    ]
    aggs.append(F.max(committed_latency).cast("long").alias("commit_latency_max_ms"))
    return aggs


def _txn_counts() -> list[Column]:
    return [
        _count_if(F.col("outcome") == "COMMITTED").alias("txn_committed"),
        _count_if(F.col("outcome") == "ABORTED").alias("txn_aborted"),
    ]


def txn_facts(transactions: DataFrame) -> DataFrame:
    return (
        transactions.withColumn("date", utc_day(F.col("time_ms")))
        .groupBy("stream_id", "date")
        .agg(*_txn_counts(), *_latency_aggs(), *_stats("txn", "time_ms"))
    )


# The event source behind each statistics suffix (spark.sources names), in reading order.
ROW_SOURCES = {
    "scale": "scale_events",
    "sealed": "segments",
    "txn": "transactions",
    "trunc": "truncation_history",
}
_KEYS = ["stream_id", "date"]


def event_facts(
    scale_events: DataFrame, segments: DataFrame, transactions: DataFrame, truncations: DataFrame
) -> DataFrame:
    """Per (stream, day) with events: the figures of STREAM_DAILY but the stream's names, then
    per source `_rows_<suffix>` (rows read for it, ROW_SOURCES) and `_last_ms` (the newest event
    time), so a run learns its high-water mark and what it read without a pass of its own.

    `truncations`: rows of the truncation history (stream_id, time_ms, truncated_bytes,
    deleted_count)."""
    joined = (
        scale_facts(scale_events)
        .join(sealed_facts(segments), _KEYS, "full_outer")
        .join(txn_facts(transactions), _KEYS, "full_outer")
        .join(truncation_facts(truncations), _KEYS, "full_outer")
    )
    rows = [f"_rows_{s}" for s in ROW_SOURCES]
    return joined.fillna(0, subset=[*COUNTS, *rows]).select(
        *[c for c in joined.columns if not c.startswith("_")],
        *rows,
        F.greatest(*(F.col(f"_last_{s}") for s in ROW_SOURCES)).alias("_last_ms"),
    )


def stream_daily(events: DataFrame, streams: DataFrame) -> DataFrame:
    """One row per (stream, day) with activity, exactly the columns of STREAM_DAILY."""
    names = F.broadcast(streams.select("stream_id", "scope", "stream"))
    return _conform(events.join(names, "stream_id", "left"), STREAM_DAILY)


def daily(transactions: DataFrame, per_stream: DataFrame) -> DataFrame:
    """Totals per day over all streams; latency percentiles from every commit of the day."""
    sums = per_stream.groupBy("date").agg(
        F.count(F.lit(1)).cast("long").alias("streams_active"),
        *[F.sum(name).cast("long").alias(name) for name in COUNTS],
    )
    latency = transactions.withColumn("date", utc_day(F.col("time_ms"))).groupBy("date").agg(*_latency_aggs())
    return _conform(sums.join(latency, "date", "left"), DAILY)


def _conform(frame: DataFrame, schema: tuple[tuple[str, T.DataType, str], ...]) -> DataFrame:
    return frame.select(*[F.col(name).cast(kind).alias(name) for name, kind, _ in schema])
