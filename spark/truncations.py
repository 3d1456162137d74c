"""Truncation growth, observed: the controller keeps only each stream's latest truncation
(cumulative truncated bytes, no time), so each run compares it with the last observation
recorded in `reporting_marts.truncation_observations` and dates the growth on the day of its
high-water mark (for a live controller: the day the run saw it).

Invariant: per stream, the observations' deltas add up to the truncated bytes last observed,
so summing `bytes_truncated` over a stream's days gives the view's `truncated_bytes`.
"""

from __future__ import annotations

from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.jdbc import JdbcTarget
from spark.marts import OBSERVATIONS_TABLE
from spark.sources import TRUNCATIONS


def _jdbc(spark: SparkSession, target: JdbcTarget, sql: str) -> DataFrame:
    return spark.read.jdbc(url=target.url, table=f"({sql}) AS t", properties=target.properties())


def new_observations(spark: SparkSession, target: JdbcTarget) -> DataFrame:
    """stream_id, truncated_bytes, bytes_delta for every stream whose truncation grew."""
    now = _jdbc(spark, target, f"SELECT {', '.join(TRUNCATIONS.select_list())} FROM {TRUNCATIONS.view}")
    seen = _jdbc(
        spark,
        target,
        f"SELECT DISTINCT ON (stream_id) stream_id, truncated_bytes AS seen_bytes FROM {OBSERVATIONS_TABLE} "
        "ORDER BY stream_id, run_id DESC",
    )
    return (
        now.join(seen, "stream_id", "left")
        .withColumn("bytes_delta", F.col("truncated_bytes") - F.coalesce(F.col("seen_bytes"), F.lit(0)))
        .where(F.col("bytes_delta") > 0)
        .select(
            F.col("stream_id").cast("long"),
            F.col("truncated_bytes").cast("long"),
            F.col("bytes_delta").cast("long"),
        )
    )


def observed_since(spark: SparkSession, target: JdbcTarget, first_day: date) -> DataFrame:
    """Earlier runs' observations dated first_day or later: stream_id, date, bytes_delta."""
    return _jdbc(
        spark,
        target,
        f"SELECT stream_id, date, bytes_delta FROM {OBSERVATIONS_TABLE} "
        f"WHERE date >= DATE '{first_day.isoformat()}'",
    )
