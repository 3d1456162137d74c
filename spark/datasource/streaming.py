"""`spark.readStream.format("pravega")`: microbatches between stream cuts. Spark's offsets are
the cuts (JSON), so a query restarted from its checkpoint resumes exactly at the cut of its last
committed batch: no event twice, none skipped, across scale-ups and scale-downs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from app.streamclient import StreamCut, cut_from_offset, spans_between, tail_cut
from spark.datasource.connect import open_stream, resolve_cut
from spark.datasource.limits import limited_cut
from spark.datasource.loop import run_once
from spark.datasource.options import SourceOptions
from spark.datasource.parts import Part, read_rows, split


class PravegaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        # Trigger.AvailableNow's end: the tail when the query started; None: the tail each time.
        self._target: StreamCut | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = run_once(self._tail())

    def initialOffset(self) -> dict[str, object]:
        return run_once(self._initial()).as_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> dict[str, object]:
        return run_once(self._latest(self._cut(start), limit)).as_offset()

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> Sequence[InputPartition]:
        return run_once(self._parts(self._cut(start), self._cut(end)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Part):
            return iter(())  # Spark's stand-in when partitions() found nothing to read
        return read_rows(self.options, self.schema, partition)

    def commit(self, end: dict[str, object]) -> None:
        """Nothing to release: the stream keeps its data whatever this query read."""

    def _cut(self, offset: dict[str, object]) -> StreamCut:
        return cut_from_offset(offset, self.options.scope, self.options.stream)

    async def _initial(self) -> StreamCut:
        async with open_stream(self.options) as segments:
            return await resolve_cut(segments, self.options.start_cut, "start_stream_cut")

    async def _tail(self) -> StreamCut:
        async with open_stream(self.options, running=True) as segments:
            return await tail_cut(segments)

    async def _latest(self, start: StreamCut, limit: ReadLimit) -> StreamCut:
        async with open_stream(self.options, running=True) as segments:
            tail = self._target if self._target is not None else await tail_cut(segments)
            if isinstance(limit, ReadMaxBytes):
                return await limited_cut(self.options, segments, start, tail, limit.max_bytes)
            return tail

    async def _parts(self, start: StreamCut, end: StreamCut) -> list[Part]:
        if start == end:
            return []
        async with open_stream(self.options, running=True) as segments:
            spans = await spans_between(
                segments, start, end, skip_truncated=self.options.on_truncation == "skip"
            )
        return split(spans, self.options.split_bytes)
