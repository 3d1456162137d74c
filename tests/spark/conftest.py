"""One local SparkSession (two cores) for every Spark test, and small seeded histories.

Starting a JVM costs seconds, so the session outlives the tests; each test gets its own
database (`db_url`) and output directory, which is all the pipeline keeps state in.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark.config import PipelineConfig, default_jdbc_jar
from spark.pipeline import RunResult, run
from spark.session import build_session
from tests.support.dataplane import start_with_segment_store
from tests.support.spark_streams import Cluster

HERE = Path(__file__).parent
# PySpark's collect() leaves the socket it read the rows from to the garbage collector (its file
# is closed, the socket object is not); that is PySpark's, harmless, and only seen by tests.
PYSPARK_SOCKETS = pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(PYSPARK_SOCKETS)


@pytest.fixture(autouse=True)
def collect_pyspark_sockets() -> Iterator[None]:
    """Collects them while the filter above still applies, not in some later test."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def spark_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    placeholder = PipelineConfig(
        db_url="postgresql://unused@127.0.0.1/unused",
        out=tmp_path_factory.mktemp("spark-session"),
        master="local[2]",
        driver_memory="1g",
        jdbc_jar=default_jdbc_jar(),
    )
    session = build_session(placeholder, app_name="pgcontroller-tests")
    try:
        yield session
    finally:
        session.stop()


def pipeline_config(db_url: str, out: Path, **overrides: object) -> PipelineConfig:
    settings: dict[str, object] = {
        "db_url": db_url,
        "out": out,
        "master": "local[2]",
        "progress": False,
        "chart_streams": 2,
        # More ranges than cores, so the tests see uneven, open-ended ranges too.
        "partitions": 3,
        **overrides,
    }
    return PipelineConfig(**settings)  # type: ignore[arg-type]


async def run_pipeline(spark: SparkSession, config: PipelineConfig) -> RunResult:
    """The pipeline drives its own event loop for its control connection: run it off this one."""
    return await asyncio.to_thread(run, config, spark)


@pytest.fixture
async def served_cluster(db_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """`serve` with its embedded segment store on the test's database, for the data source."""
    served = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield Cluster("serve", served.grpc_port)
    finally:
        code = await served.stop()
        assert code == 0, served.log()[-4000:]
