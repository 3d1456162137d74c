"""The transactional sink uses its controller channel on the loop thread that runs it, closing
included: grpclib's close is not thread-safe, and a close from Spark's task thread once met a
second close of the same connection (an AttributeError from inside grpclib failed the task, in
a CI run). Every close of the sink's controllers is recorded with its thread."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pyspark.sql import Row
from pyspark.sql.types import StringType, StructField, StructType

from app.streamclient import StreamController
from spark.datasource.loop import LoopThread
from spark.datasource.options import read_options
from spark.datasource.sink import _TxnSink
from tests.support.spark_streams import Admin, Cluster


async def test_every_controller_the_sink_opens_is_closed_on_its_loop_thread(
    served_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = Admin(served_cluster)
    try:
        await admin.create_stream("sinkthreads", "s", segments=1)
    finally:
        admin.close()
    loop_threads: set[int] = set()
    closed_on: list[int] = []
    original_init, original_close = LoopThread.__init__, StreamController.close

    def recording_init(self: LoopThread) -> None:
        original_init(self)
        loop_threads.add(self._thread.ident or 0)

    def recording_close(self: StreamController) -> None:
        closed_on.append(threading.get_ident())
        original_close(self)

    monkeypatch.setattr(LoopThread, "__init__", recording_init)
    monkeypatch.setattr(StreamController, "close", recording_close)
    options = read_options(served_cluster.options("sinkthreads", "s"))
    schema = StructType([StructField("event", StringType())])

    def write() -> int:
        sink = _TxnSink(options, schema)
        return sink.write_rows(iter([Row(event="a"), Row(event="b")])).events

    assert await asyncio.to_thread(write) == 2
    # The stream check's controller and the writer's; each on the thread of a loop the sink ran.
    assert len(closed_on) >= 2
    assert set(closed_on) <= loop_threads, (closed_on, loop_threads)
