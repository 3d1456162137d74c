"""A Spark job of its own (a JVM of its own) that writes rows to a stream through the `pravega`
data source, one partition hanging forever, so a test can kill it after the other tasks wrote:
`python -m tests.spark.sink_job CONTROLLER SCOPE STREAM ROWS PARTITIONS`."""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from spark.datasource import register


def rows(count: int) -> list[tuple[str, str]]:
    return [(f"k{i % 10}", f"row-{i:06d}") for i in range(count)]


def hang_in_last(partitions: int) -> object:
    def event(text: str, partition: int) -> str:
        if partition == partitions - 1:
            time.sleep(3600)
        return text

    return F.udf(event, StringType(), useArrow=False)


def main(controller: str, scope: str, stream: str, count: int, partitions: int) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    register(spark)
    frame = spark.createDataFrame(rows(count), "routing_key string, event string").repartition(partitions)
    hang = hang_in_last(partitions)
    (
        frame.select("routing_key", hang("event", F.spark_partition_id()).alias("event"))
        .write.format("pravega")
        .options(controller=controller, scope=scope, stream=stream, transaction_timeout_ms="10000")
        .mode("append")
        .save()
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
