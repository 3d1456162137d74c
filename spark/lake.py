"""The Parquet lake: `<lake>/stream_daily/date=YYYY-MM-DD/` and `<lake>/daily/date=.../`.

Writes replace whole date partitions (dynamic overwrite), and a recomputed day that no longer
has any fact is removed, so after a run the lake's days >= the recomputed day equal exactly
what the views hold. Paths go through Hadoop's FileSystem, so any URI Spark can write works.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession

STREAM_DAILY = "stream_daily"
DAILY = "daily"


def _fs_path(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem and Path for `uri` (py4j proxies: untyped)."""
    sc = spark.sparkContext
    jvm, jsc = sc._jvm, sc._jsc
    assert jvm is not None and jsc is not None, "the SparkContext is stopped"
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(jsc.hadoopConfiguration()), path


def table_uri(lake: str, table: str) -> str:
    return f"{lake}/{table}"


def has_table(spark: SparkSession, lake: str, table: str) -> bool:
    fs, path = _fs_path(spark, table_uri(lake, table))
    return bool(fs.exists(path))


def partition_days(spark: SparkSession, lake: str, table: str) -> list[date]:
    fs, path = _fs_path(spark, table_uri(lake, table))
    if not fs.exists(path):
        return []
    days = []
    for status in fs.listStatus(path):
        name = status.getPath().getName()
        if status.isDirectory() and name.startswith("date="):
            days.append(date.fromisoformat(name[len("date=") :]))
    return sorted(days)


def drop_days(spark: SparkSession, lake: str, table: str, days: list[date]) -> None:
    for day in days:
        fs, path = _fs_path(spark, f"{table_uri(lake, table)}/date={day.isoformat()}")
        fs.delete(path, True)


def write(
    spark: SparkSession, frame: DataFrame, lake: str, table: str, first_day: date | None, full: bool
) -> None:
    """Replaces the table's partitions of days >= first_day with `frame` (whole table if full)."""
    writer = frame.repartition("date").write.mode("overwrite").partitionBy("date")
    if full:
        writer = writer.option("partitionOverwriteMode", "static")
    else:
        recomputed = [
            d for d in partition_days(spark, lake, table) if first_day is not None and d >= first_day
        ]
        if recomputed:
            written = {row[0] for row in frame.select("date").distinct().collect()}
            drop_days(spark, lake, table, [d for d in recomputed if d not in written])
    writer.parquet(table_uri(lake, table))
