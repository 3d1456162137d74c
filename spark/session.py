"""The SparkSession: local mode sized for a small machine by default, any master URL accepted.

Everything the JVM must know before it starts (driver memory, the JDBC driver on the
classpath) is set here, because PySpark launches the JVM from these settings exactly once.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from spark.config import PipelineConfig, local_cores

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


class JdbcDriverMissing(RuntimeError):
    """The PostgreSQL JDBC jar is not where the configuration says (`make spark-deps` installs it)."""


def shuffle_partitions(master: str) -> int:
    cores = local_cores(master)
    # Two per core keeps every core busy through a skewed stage; Spark's 200 suits clusters.
    return 2 * cores if cores is not None else 200


def build_session(config: PipelineConfig, app_name: str = "pgcontroller-pipeline") -> SparkSession:
    if not Path(config.jdbc_jar).is_file():
        raise JdbcDriverMissing(
            f"PostgreSQL JDBC driver not found at {config.jdbc_jar}: install Debian's "
            "libpostgresql-jdbc-java (make spark-deps) or pass --jdbc-jar / PGCONTROLLER_JDBC_JAR"
        )
    builder = (
        SparkSession.builder.master(config.master)
        .appName(app_name)
        .config("spark.jars", config.jdbc_jar)
        .config("spark.driver.extraClassPath", config.jdbc_jar)
        .config("spark.driver.memory", config.driver_memory)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # ANSI mode (Spark 4's default; off in Spark 3) gives every fact the figure it gave
        # before: the views' columns are integers and text, read by sums, counts, maxima and
        # widening casts. It differs only past a bigint, where a sum would wrap into a wrong
        # figure and now fails the run instead. Set here so a cluster's defaults cannot turn it off.
        .config("spark.sql.ansi.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions(config.master)))
        .config("spark.sql.adaptive.enabled", "true")
        # Rewrite only the date partitions a run recomputed; the rest of the lake is history.
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.parquet.compression.codec", "snappy")
    )
    # Python data sources (the `pravega` source) and UDFs run in Python workers Spark starts
    # itself: with this interpreter (the virtual environment's, which has pyarrow and this
    # package), not whichever `python3` is first on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if local_cores(config.master) is not None:
        # Local mode talks to itself only: never bind or advertise a public interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    # py4j logs every connection it closes at INFO; the pipeline reports progress itself.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
