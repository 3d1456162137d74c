"""`df.write.format("pravega")` and `writeStream.format("pravega")`: exactly once through
Pravega's transactions.

Each task writes its rows into a transaction of its own (routing key from one column, event
from another), keeps it open with pings while it writes, and hands its id to the driver in its
commit message. The driver asks the controller to commit them all when Spark commits the job
(or the microbatch), and to abort them when Spark aborts it. A task that fails aborts its own
transaction; one killed outright leaves it open until its lease runs out, then the controller
aborts it. So no event of a job or batch that did not commit is ever readable, and a retried
job writes each row once.

The one window: the driver dying between two commit calls of one job leaves some of its
transactions committed and the rest to time out (Pravega's commits are per transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from app.streamclient import StreamController, TxnWriter, abort_all, commit_all, wait_committed
from spark.datasource.connect import check_stream
from spark.datasource.loop import LoopThread, run_once
from spark.datasource.options import OptionError, SourceOptions


@dataclass(frozen=True)
class TxnWritten(WriterCommitMessage):
    """One task's transaction, to be committed by the driver."""

    txn: tuple[int, int]
    events: int


def check_write_schema(schema: StructType, options: SourceOptions) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    event = fields.get(options.event_column)
    if not isinstance(event, BinaryType | StringType):
        raise OptionError(
            f"writing to pravega needs a binary or string column {options.event_column!r} "
            f"(option event_column); the data has {', '.join(fields) or 'no columns'}"
        )
    key = fields.get(options.routing_key_column)
    if key is not None and not isinstance(key, StringType):
        raise OptionError(f"the routing key column {options.routing_key_column!r} is a string, not {key}")


class _TxnSink:
    """What the batch and the streaming writer share."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        check_write_schema(schema, options)
        run_once(check_stream(options, write=True))
        self.options = options
        self.has_key = options.routing_key_column in schema.names

    def write_rows(self, rows: Iterator[Row]) -> TxnWritten:
        """Runs in a task: Spark's rows are taken on this thread (computing them may take long),
        the transaction's appends and pings on the loop's."""
        options = self.options
        loop = LoopThread()
        # A grpclib channel belongs to the loop it is made on.
        controller = loop.run(_open_controller(options))
        try:
            writer = loop.run(
                TxnWriter.begin(
                    controller, options.scope, options.stream, lease_ms=options.lease_ms, tls=options.tls()
                )
            )
            pings = loop.spawn(_keep_open(writer))
            try:
                for events in _batches(rows, options, self.has_key):
                    if pings.done():
                        pings.result()  # a lease that could not be renewed fails the task
                    loop.run(writer.write_all(events))
                loop.run(writer.flush())
                if pings.done():
                    pings.result()
                return TxnWritten(writer.txn_key, writer.events_written)
            except BaseException:
                with contextlib.suppress(Exception):
                    loop.run(writer.abort())
                raise
            finally:
                pings.cancel()
                loop.run(writer.close())
        finally:
            # On the loop's thread, like every use of the channel: grpclib's close is not
            # thread-safe, and closed from this thread it once met a second close of the same
            # connection (an AttributeError from inside grpclib failed the task).
            loop.run(_close_controller(controller))
            loop.close()

    def commit_txns(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        txns = [m.txn for m in messages if isinstance(m, TxnWritten)]
        run_once(_commit(self.options, txns))

    def abort_txns(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        txns = [m.txn for m in messages if isinstance(m, TxnWritten)]
        run_once(_abort(self.options, txns))


# Rows are handed to the loop in groups of this many bytes: one thread hop per group.
_GROUP_BYTES = 256 * 1024


def _batches(
    rows: Iterator[Row], options: SourceOptions, has_key: bool
) -> Iterator[list[tuple[str | None, bytes]]]:
    event_column, key_column = options.event_column, options.routing_key_column
    group: list[tuple[str | None, bytes]] = []
    size = 0
    for row in rows:
        event = row[event_column]
        if event is None:
            raise OptionError(f"a row has a null {event_column!r}: every row written is an event")
        payload = event.encode() if isinstance(event, str) else bytes(event)
        group.append((row[key_column] if has_key else None, payload))
        size += len(payload)
        if size >= _GROUP_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


async def _keep_open(writer: TxnWriter) -> None:
    while True:
        await asyncio.sleep(writer.lease_ms / 3000)
        await writer.ping()


async def _commit(options: SourceOptions, txns: list[tuple[int, int]]) -> None:
    controller = _controller(options)
    try:
        await commit_all(controller, options.scope, options.stream, txns, options.lease_ms)
        # Committed is readable: a reader of the stream sees the batch once the job returns.
        await wait_committed(controller, options.scope, options.stream, txns, options.commit_timeout_s)
    finally:
        controller.close()


async def _abort(options: SourceOptions, txns: list[tuple[int, int]]) -> None:
    controller = _controller(options)
    try:
        await abort_all(controller, options.scope, options.stream, txns)
    finally:
        controller.close()


async def _open_controller(options: SourceOptions) -> StreamController:
    return _controller(options)


async def _close_controller(controller: StreamController) -> None:
    controller.close()


def _controller(options: SourceOptions) -> StreamController:
    return StreamController(options.controller, tls=options.tls(), credentials=options.credentials)


class PravegaBatchWriter(DataSourceWriter):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._sink = _TxnSink(options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return self._sink.write_rows(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._sink.commit_txns(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._sink.abort_txns(messages)


class PravegaStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._sink = _TxnSink(options, schema)

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return self._sink.write_rows(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._sink.commit_txns(messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._sink.abort_txns(messages)
