"""`spark.read.format("pravega")`: the events between two stream cuts, one input partition per
segment range (split by size), as Pravega's batch client reads a stream.

It takes no filters: Spark 4.3 keeps the filters one query of a DataFrame pushed to a Python
data source's reader and plans the DataFrame's later queries with them (measured here:
`df.where("offset < 100").count()` then `df.count()` counted the filtered rows again), so a
pushed filter could silently drop rows. Spark applies filters on `segment_id` and `offset` after
the read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from app.streamclient import spans_between
from spark.datasource.connect import open_stream, resolve_cut
from spark.datasource.loop import run_once
from spark.datasource.options import SourceOptions
from spark.datasource.parts import Part, read_rows, split


class PravegaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return run_once(self._plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Part):
            return iter(())  # Spark's stand-in when partitions() found nothing to read
        return read_rows(self.options, self.schema, partition)

    async def _plan(self) -> list[Part]:
        async with open_stream(self.options) as segments:
            start = await resolve_cut(segments, self.options.start_cut, "start_stream_cut")
            end = await resolve_cut(segments, self.options.end_cut, "end_stream_cut")
            spans = await spans_between(
                segments, start, end, skip_truncated=self.options.on_truncation == "skip"
            )
        return split(spans, self.options.split_bytes)
