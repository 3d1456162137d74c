"""The `pravega` Spark data source (spark/datasource/) end to end, PySpark local[2]: batch reads
across a scale, bounded by cuts and after a truncation, and streaming reads restarted from their
checkpoint across a scale, each against `serve` and against Pravega 0.13 standalone (the
oracle); the exactly-once sink and the errors against `serve`."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from app.api.grpc.proto import controller_pb2 as pb
from app.kvtclient.controller import controller_tls
from app.security.certs import make_dev_certs
from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.streamclient import Credentials, StreamController
from spark.datasource import register
from tests.conformance.pravega_standalone import Standalone, start_standalone
from tests.spark.sink_job import rows
from tests.support.dataplane import REPO_ROOT
from tests.support.spark_streams import (
    Admin,
    Cluster,
    check_exactly_once,
    check_segment_order,
    event_name,
    expected_names,
    write_events,
)
from tests.support.tls_served import served_with_tls

pytestmark = pytest.mark.timeout(600)

FOUR = [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]


@pytest.fixture(scope="module")
def spark(spark_session: SparkSession) -> SparkSession:
    register(spark_session)
    return spark_session


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    oracle = start_standalone(tmp_path_factory.mktemp("pravega"))
    try:
        yield oracle
    finally:
        oracle.stop()


@pytest.fixture(params=["serve", "pravega"])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    # Not a coroutine: the fixtures it asks for may start an event loop of their own.
    if request.param == "pravega":
        return Cluster("pravega", request.getfixturevalue("standalone").controller_port)
    served: Cluster = request.getfixturevalue("served_cluster")
    return served


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Admin]:
    control = Admin(cluster)
    try:
        yield control
    finally:
        control.close()


def read(spark: SparkSession, cluster: Cluster, scope: str, stream: str, **options: str) -> DataFrame:
    return spark.read.format("pravega").options(**cluster.options(scope, stream, **options)).load()


def rows_of(frame: DataFrame) -> list[tuple[int, int, str]]:
    return [
        (r.segment_id, r.offset, event_name(r.event))
        for r in frame.select("segment_id", "offset", "event").collect()
    ]


async def test_batch_read_across_a_scale_bounded_by_cuts_and_after_truncation(
    spark: SparkSession, cluster: Cluster, admin: Admin, tmp_path: Path
) -> None:
    scope, stream = "sparkbatch", "scaled"
    info = await admin.create_stream(scope, stream, 4)
    await write_events(cluster, tmp_path, scope, stream, count=2000, keys=16, prefix="a")
    middle = await admin.tail(scope, stream)
    # Two of the four segments sealed into three: the middle successor has both as predecessors.
    await admin.scale(info, [0, 1], [(0.0, 0.1), (0.1, 0.3), (0.3, 0.5)])
    await write_events(cluster, tmp_path, scope, stream, count=2000, keys=16, prefix="b")
    first, second = expected_names("a", 2000, 16), expected_names("b", 2000, 16)

    whole = read(spark, cluster, scope, stream)
    assert whole.schema.simpleString() == (
        "struct<event:binary,scope:string,stream:string,segment_id:bigint,offset:bigint>"
    )
    rows = rows_of(whole)
    check_exactly_once((name for _, _, name in rows), first | second)
    check_segment_order(rows)
    epoch_of = {name: segment_id >> 32 for segment_id, _, name in rows}
    # Segments 2 and 3 were not sealed: they hold events of both writers, the first ones first.
    assert {epoch_of[n] for n in first} == {0}
    assert {epoch_of[n] for n in second} == {0, 1}
    assert {r.scope for r in whole.select("scope").distinct().collect()} == {scope}

    split = read(spark, cluster, scope, stream, split_size_bytes="20000")
    assert split.rdd.getNumPartitions() > 7  # seven non-empty segment ranges, split further
    assert sorted(rows_of(split)) == sorted(rows)

    before = rows_of(read(spark, cluster, scope, stream, end_stream_cut=middle.as_text()))
    check_exactly_once((name for _, _, name in before), first)
    after = rows_of(read(spark, cluster, scope, stream, start_stream_cut=middle.to_json()))
    check_exactly_once((name for _, _, name in after), second)
    check_segment_order(after)

    await admin.truncate(middle)
    truncated = rows_of(read(spark, cluster, scope, stream))
    check_exactly_once((name for _, _, name in truncated), second)
    texts = read(spark, cluster, scope, stream, encoding="utf8").select("event").collect()
    assert {t.event.split("|")[0] for t in texts} == second


def checkpointed(checkpoint: Path, kind: str) -> int:
    folder = checkpoint / kind
    return len([p for p in folder.iterdir() if p.name.isdigit()]) if folder.exists() else 0


async def wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        await asyncio.sleep(0.2)


async def test_streaming_read_stopped_mid_batch_resumes_from_its_checkpoint_across_a_scale(
    spark: SparkSession, cluster: Cluster, admin: Admin, tmp_path: Path
) -> None:
    scope, stream = "sparkstream", "flowing"
    info = await admin.create_stream(scope, stream, 2)
    await write_events(cluster, tmp_path, scope, stream, count=3000, keys=8, prefix="a")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def named_slowly(event: bytes) -> str:
        time.sleep(0.002)  # a batch takes about a second, so the stop below lands inside one
        return event_name(event)

    name = F.udf(named_slowly, StringType(), useArrow=False)

    def start(**trigger: object) -> object:
        options = cluster.options(scope, stream, start_stream_cut="earliest", max_bytes_per_trigger="40000")
        source = spark.readStream.format("pravega").options(**options).load()
        return (
            source.select(name("event").alias("name"), "segment_id", "offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="0 seconds")
    await wait_for(lambda: checkpointed(checkpoint, "commits") >= 2, 120, "two committed batches")
    # The stream scales and grows while the query runs.
    await admin.scale(info, [0], [(0.0, 0.25), (0.25, 0.5)])
    await write_events(cluster, tmp_path, scope, stream, count=2000, keys=8, prefix="b")
    await wait_for(lambda: query.status["isTriggerActive"], 60, "a batch in progress")  # type: ignore[attr-defined]
    query.stop()  # type: ignore[attr-defined]
    planned, committed = checkpointed(checkpoint, "offsets"), checkpointed(checkpoint, "commits")
    assert planned == committed + 1, f"stopped between batches ({planned} planned, {committed} committed)"
    assert committed >= 2

    resumed = start(availableNow=True)
    resumed.awaitTermination(300)  # type: ignore[attr-defined]
    assert resumed.exception() is None  # type: ignore[attr-defined]
    rows = [(r.segment_id, r.offset, r.name) for r in spark.read.parquet(str(out)).collect()]
    check_exactly_once((n for _, _, n in rows), expected_names("a", 3000, 8) | expected_names("b", 2000, 8))
    check_segment_order(rows)
    assert any(segment_id >> 32 == 1 for segment_id, _, _ in rows)  # the successors were read


async def open_txns(db_url: str, scope: str, stream: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM transactions t JOIN streams s ON s.id = t.stream_id "
                "WHERE s.scope = $1 AND s.name = $2 AND t.status = 'OPEN'",
                scope,
                stream,
            )
        )
    finally:
        await conn.close()


async def test_a_killed_write_job_leaves_nothing_readable_and_its_retry_writes_each_row_once(
    spark: SparkSession, served_cluster: Cluster, db_url: str, tmp_path: Path
) -> None:
    scope, stream, count, partitions = "sparksink", "target", 2000, 4
    admin = Admin(served_cluster)
    try:
        await admin.create_stream(scope, stream, 3)
    finally:
        admin.close()
    log = tmp_path / "job.log"
    with open(log, "wb") as output:  # noqa: ASYNC230 - handed to the child
        job = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.spark.sink_job", served_cluster.controller, scope, stream,
            str(count), str(partitions),
            cwd=REPO_ROOT, stdout=output, stderr=output, start_new_session=True,
        )  # fmt: skip
    try:
        # Every task opened its transaction; all but the hanging one wrote theirs and returned.
        deadline = time.monotonic() + 180
        while await open_txns(db_url, scope, stream) < partitions:
            assert job.returncode is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            await asyncio.sleep(0.3)
        await asyncio.sleep(2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        await job.wait()
    target = read(spark, served_cluster, scope, stream)
    assert target.count() == 0
    # Nobody pings them any more: the controller aborts them once their 10 s leases run out.
    deadline = time.monotonic() + 90
    while await open_txns(db_url, scope, stream):
        assert time.monotonic() < deadline, "the killed job's transactions stayed open"
        await asyncio.sleep(0.5)
    assert read(spark, served_cluster, scope, stream).count() == 0

    frame = spark.createDataFrame(rows(count), "routing_key string, event string").repartition(partitions)
    frame.write.format("pravega").options(**served_cluster.options(scope, stream)).mode("append").save()
    written = read(spark, served_cluster, scope, stream, encoding="utf8").select("event").collect()
    check_exactly_once((r.event for r in written), {event for _, event in rows(count)})


def failure(action: object) -> str:
    with pytest.raises(Exception) as caught:
        action()  # type: ignore[operator]
    return str(caught.value)


async def test_bad_options_fail_when_the_query_is_defined_with_the_reason(
    spark: SparkSession, served_cluster: Cluster, db_url: str, tmp_path: Path
) -> None:
    admin = Admin(served_cluster)
    try:
        await admin.create_stream("sparkbad", "there", 1)
    finally:
        admin.close()
    good = served_cluster.options("sparkbad", "there")

    def load(**options: str) -> object:
        return lambda: spark.read.format("pravega").options(**options).load()

    assert "needs the option 'stream'" in failure(load(controller=good["controller"], scope="sparkbad"))
    assert "sparkbad/nowhere does not exist" in failure(load(**{**good, "stream": "nowhere"}))
    assert "not valid JSON" in failure(load(**good, start_stream_cut="{oops"))
    assert "neither JSON nor Pravega's StreamCut.asText()" in failure(load(**good, end_stream_cut="??"))
    assert "names segment 7" not in failure(load(**good, start_stream_cut='{"7": 0}'))
    assert "is not a cut of sparkbad/there" in failure(load(**good, start_stream_cut='{"7": 0}'))
    assert "option 'encoding' is one of" in failure(load(**good, encoding="xml"))
    assert "give the schema" in failure(load(**good, encoding="json"))
    unreachable = {**good, "controller": "127.0.0.1:9"}
    assert "cannot be reached" in failure(load(**unreachable))
    frame = spark.createDataFrame([("x",)], "payload string")
    assert "needs a binary or string column 'event'" in failure(
        lambda: frame.write.format("pravega").options(**good).mode("append").save()
    )


def start_copying(
    spark: SparkSession, cluster: Cluster, scope: str, stream: str, out: Path, **options: str
) -> object:
    """A streaming query copying the stream's event names to Parquet, a batch at a time."""

    def named_slowly(event: bytes) -> str:
        time.sleep(0.002)
        return event_name(event)

    name = F.udf(named_slowly, StringType(), useArrow=False)
    settings = {"start_stream_cut": "earliest", "max_bytes_per_trigger": "20000", **options}
    source = spark.readStream.format("pravega").options(**cluster.options(scope, stream, **settings)).load()
    return (
        source.select(name("event").alias("name"))
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )


async def test_a_stream_deleted_or_truncated_under_a_running_query_fails_it_with_the_reason(
    spark: SparkSession, served_cluster: Cluster, tmp_path: Path
) -> None:
    admin = Admin(served_cluster)
    try:
        for stream in ("deleted", "truncated", "skipping"):
            await admin.create_stream("sparkgone", stream, 1)
            await write_events(served_cluster, tmp_path, "sparkgone", stream, count=2000, keys=4, prefix="a")

        deleted = start_copying(spark, served_cluster, "sparkgone", "deleted", tmp_path / "deleted")
        await wait_for(
            lambda: checkpointed(tmp_path / "deleted" / "checkpoint", "commits") >= 1, 120, "a batch"
        )
        await admin.delete("sparkgone", "deleted")
        await wait_for(lambda: not deleted.isActive, 120, "the query to fail")  # type: ignore[attr-defined]
        assert "stream sparkgone/deleted was deleted while the query ran" in str(deleted.exception())  # type: ignore[attr-defined]

        for stream, skip in (("truncated", False), ("skipping", True)):
            out = tmp_path / stream
            options = {"on_truncation": "skip"} if skip else {}
            query = start_copying(spark, served_cluster, "sparkgone", stream, out, **options)
            await wait_for(lambda out=out: checkpointed(out / "checkpoint", "commits") >= 1, 120, "a batch")
            # Everything written so far goes, while the query is far from done with it.
            await admin.truncate(await admin.tail("sparkgone", stream))
            await write_events(served_cluster, tmp_path, "sparkgone", stream, count=500, keys=4, prefix="b")
            if not skip:
                await wait_for(lambda q=query: not q.isActive, 120, "the query to fail")  # type: ignore[attr-defined]
                reason = str(query.exception())  # type: ignore[attr-defined]
                assert "was truncated past the data this query reads" in reason, reason
                assert "on_truncation=skip" in reason
                continue
            later = expected_names("b", 500, 4)
            await wait_for(
                lambda out=out, later=later: (
                    (out / "data").exists()
                    and later <= {r.name for r in spark.read.parquet(str(out / "data")).collect()}
                ),
                120,
                "the events written after the truncation",
            )
            assert query.isActive  # type: ignore[attr-defined]
            query.stop()  # type: ignore[attr-defined]
            names = [r.name for r in spark.read.parquet(str(out / "data")).collect()]
            assert len(names) == len(set(names)) and len(names) < 2500  # nothing twice, some skipped
    finally:
        admin.close()


async def test_over_tls_credentials_are_sent_and_refused_ones_fail_the_load(
    spark: SparkSession, db_url: str, tmp_path: Path
) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=1)
    try:
        await PgAccountStore(pool).add("analyst", hash_password("analyst-pw"), "prn::*,READ_UPDATE", 1)
    finally:
        await pool.close()
    certs = make_dev_certs(tmp_path / "certs")
    async with served_with_tls(tmp_path, certs, "--db-url", db_url, "--auth-enabled") as served:
        controller = f"tls://localhost:{served.grpc_port}"
        setup = StreamController(
            controller,
            tls=controller_tls(controller, certs.ca_cert),
            credentials=Credentials("analyst", "analyst-pw"),
        )
        try:
            stub = setup._stub
            auth = {"authorization": "Basic " + base64.b64encode(b"analyst:analyst-pw").decode()}
            await stub.createScope(pb.ScopeInfo(scope="sparkauth"), metadata=auth)
            info = pb.StreamInfo(scope="sparkauth", stream="guarded")
            config = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=2))
            assert (await stub.createStream(config, metadata=auth)).status == pb.CreateStreamStatus.SUCCESS
        finally:
            setup.close()
        options = {
            "controller": controller,
            "scope": "sparkauth",
            "stream": "guarded",
            "tls_trust_file": str(certs.ca_cert),
            "username": "analyst",
        }
        frame = spark.createDataFrame(
            [(f"k{i}", f"guarded-{i}") for i in range(100)], "routing_key string, event string"
        )
        frame.write.format("pravega").options(**options, password="analyst-pw").mode("append").save()
        read_back = (
            spark.read.format("pravega").options(**options, password="analyst-pw", encoding="utf8").load()
        )
        assert sorted(r.event for r in read_back.collect()) == sorted(f"guarded-{i}" for i in range(100))
        refused = failure(
            lambda: spark.read.format("pravega").options(**options, password="Not-Her-Secret-42").load()
        )
        assert "the controller refused" in refused, refused
        assert "Not-Her-Secret-42" not in refused
        anonymous = {k: v for k, v in options.items() if k != "username"}
        assert "the controller refused" in failure(
            lambda: spark.read.format("pravega").options(**anonymous).load()
        )
        # Without the CA, the controller's certificate is not trusted: refused before any RPC.
        untrusted = {k: v for k, v in options.items() if k != "tls_trust_file"}
        assert "cannot be reached" in failure(
            lambda: spark.read.format("pravega").options(**untrusted, password="analyst-pw").load()
        )


async def test_json_orders_a_sql_query_and_a_streaming_aggregation_into_another_stream(
    spark: SparkSession, served_cluster: Cluster, tmp_path: Path
) -> None:
    """docs/analysts.md's examples, as written there."""
    admin = Admin(served_cluster)
    try:
        await admin.create_stream("shop", "orders", 3)
        await admin.create_stream("shop", "sku-totals", 2)
    finally:
        admin.close()
    orders = [(f"sku-{i % 7}", i % 5 + 1) for i in range(700)]
    wanted: dict[str, int] = {}
    for sku, qty in orders:
        wanted[sku] = wanted.get(sku, 0) + qty
    frame = spark.createDataFrame(orders, "sku string, qty long")
    (
        frame.select(F.col("sku").alias("routing_key"), F.to_json(F.struct("sku", "qty")).alias("event"))
        .write.format("pravega")
        .options(**served_cluster.options("shop", "orders"))
        .mode("append")
        .save()
    )

    shop = served_cluster.options("shop", "orders", encoding="json")
    spark.read.format("pravega").options(**shop).schema(
        "sku string, qty long, segment_id long"
    ).load().createOrReplaceTempView("orders")
    top = spark.sql(
        "SELECT sku, sum(qty) AS qty, count(DISTINCT segment_id) AS segments FROM orders GROUP BY sku"
    ).collect()
    assert {r.sku: r.qty for r in top} == wanted
    assert {r.segments for r in top} == {1}  # a routing key's events are in one segment

    streamed = (
        spark.readStream.format("pravega")
        .options(**shop, start_stream_cut="earliest")
        .schema("sku string, qty long")
        .load()
    )
    totals = streamed.groupBy("sku").agg(F.sum("qty").alias("qty"))
    query = (
        totals.select(F.col("sku").alias("routing_key"), F.to_json(F.struct("sku", "qty")).alias("event"))
        .writeStream.format("pravega")
        .outputMode("complete")
        .options(**served_cluster.options("shop", "sku-totals"))
        .option("checkpointLocation", str(tmp_path / "sku-totals"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    written = spark.read.format("pravega").options(
        **served_cluster.options("shop", "sku-totals", encoding="json")
    )
    latest = written.schema("sku string, qty long, segment_id long, offset long").load().collect()
    last = {r.sku: r.qty for r in sorted(latest, key=lambda r: (r.segment_id, r.offset))}
    assert last == wanted
