"""The `pravega` Spark data source: `spark.read.format("pravega")`, `readStream`, `write` and
`writeStream` over any Pravega-compatible cluster (this project's or Pravega's), through the
controller's gRPC and the segment stores' wire protocol (app/streamclient). docs/analysts.md
shows its use.

    from spark.datasource import register
    register(spark)
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark.datasource.options import OptionError
from spark.datasource.source import NAME, PravegaDataSource

__all__ = ["NAME", "OptionError", "PravegaDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Registers the source as `pravega` (the same as `spark.dataSource.register(PravegaDataSource)`)."""
    spark.dataSource.register(PravegaDataSource)
