"""The `pravega` data source: options checked when the query is defined, then the batch reader,
the streaming reader, and the exactly-once writers."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark.datasource.batch import PravegaBatchReader
from spark.datasource.connect import check_stream
from spark.datasource.loop import run_once
from spark.datasource.options import OptionError, read_options
from spark.datasource.rows import check_schema, default_schema
from spark.datasource.sink import PravegaBatchWriter, PravegaStreamWriter
from spark.datasource.streaming import PravegaStreamReader

NAME = "pravega"


class PravegaDataSource(DataSource):
    """Registered as `pravega`. Reads: `controller`, `scope`, `stream`, optional
    `start_stream_cut`/`end_stream_cut` (`earliest`, `latest`, Pravega's StreamCut.asText() or
    JSON). Writes: the `event` column (binary or string) into transactions, routed by the
    `routing_key` column when there is one. docs/analysts.md lists every option."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        options = read_options(self.options)
        if options.encoding == "json":
            raise OptionError("encoding=json reads the events' fields: give the schema with .schema(...)")
        run_once(check_stream(options))
        return default_schema(options.encoding)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = read_options(self.options)
        check_schema(schema, options.encoding)
        run_once(check_stream(options))
        return PravegaBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = read_options(self.options, streaming=True)
        check_schema(schema, options.encoding)
        run_once(check_stream(options))
        return PravegaStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("a Pravega stream is appended to: write with mode 'append', not 'overwrite'")
        return PravegaBatchWriter(read_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return PravegaStreamWriter(read_options(self.options), schema)
