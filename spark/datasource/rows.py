"""Events as Spark rows: one Arrow record batch per reply's worth of events, in the schema the
query reads (the default one, or the user's for JSON events).

Invariant: an event that cannot be decoded as the `encoding` option says fails the task with
its segment and offset, never a null or a skipped row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from app.streamclient import StreamError

METADATA_COLUMNS: Final = ("scope", "stream", "segment_id", "offset")


def default_schema(encoding: str) -> StructType:
    event = StringType() if encoding == "utf8" else BinaryType()
    return StructType(
        [
            StructField("event", event, nullable=False),
            StructField("scope", StringType(), nullable=False),
            StructField("stream", StringType(), nullable=False),
            StructField("segment_id", LongType(), nullable=False),
            StructField("offset", LongType(), nullable=False),
        ]
    )


class BatchBuilder:
    """Builds the record batches of one scope/stream in one schema."""

    def __init__(self, schema: StructType, encoding: str, scope: str, stream: str, segment_name: str) -> None:
        self.schema = schema
        self.arrow_schema = to_arrow_schema(schema)
        self.names = [f.name for f in schema.fields]
        self.encoding = encoding
        self.scope = scope
        self.stream = stream
        self.segment_name = segment_name

    def build(self, segment_id: int, events: Sequence[tuple[int, bytes]]) -> pa.RecordBatch:
        if self.encoding == "json":
            return self._build_json(segment_id, events)
        count = len(events)
        payloads: list[Any] = [data for _, data in events]
        if self.encoding == "utf8":
            payloads = [self._text(offset, data) for offset, data in events]
        columns = {
            "event": pa.array(payloads, self.arrow_schema.field("event").type)
            if "event" in self.names
            else None,
            "scope": pa.repeat(pa.scalar(self.scope, pa.string()), count),
            "stream": pa.repeat(pa.scalar(self.stream, pa.string()), count),
            "segment_id": pa.repeat(pa.scalar(segment_id, pa.int64()), count),
            "offset": pa.array([offset for offset, _ in events], pa.int64()),
        }
        return pa.RecordBatch.from_arrays([columns[name] for name in self.names], schema=self.arrow_schema)

    def _build_json(self, segment_id: int, events: Sequence[tuple[int, bytes]]) -> pa.RecordBatch:
        count = len(events)
        metadata: dict[str, Any] = {
            "scope": [self.scope] * count,
            "stream": [self.stream] * count,
            "segment_id": [segment_id] * count,
            "offset": [offset for offset, _ in events],
        }
        decoded = [self._json(offset, data) for offset, data in events]
        columns = {
            name: metadata[name] if name in metadata else [d.get(name) for d in decoded]
            for name in self.names
        }
        return pa.RecordBatch.from_pydict(columns, schema=self.arrow_schema)

    def _text(self, offset: int, data: bytes) -> str:
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise StreamError(
                f"the event at offset {offset} of segment {self.segment_name} is not UTF-8 ({exc.reason}); "
                "read it with encoding=binary"
            ) from None

    def _json(self, offset: int, data: bytes) -> dict[str, Any]:
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StreamError(
                f"the event at offset {offset} of segment {self.segment_name} is not JSON ({exc}); "
                "read it with encoding=binary"
            ) from None
        if not isinstance(value, dict):
            raise StreamError(
                f"the event at offset {offset} of segment {self.segment_name} is JSON but not an object"
            )
        return value


def check_schema(schema: StructType, encoding: str) -> None:
    """A user's schema fits the encoding: binary and utf8 read the default columns only (a subset
    in any order); json reads the objects' fields by name, and the metadata columns if named."""
    from spark.datasource.options import OptionError

    if encoding == "json":
        return
    default = {f.name: f.dataType for f in default_schema(encoding).fields}
    for field in schema.fields:
        if default.get(field.name) != field.dataType:
            raise OptionError(
                f"column {field.name} {field.dataType.simpleString()} is not one the pravega source "
                f"reads with encoding={encoding} (it reads {', '.join(default)})"
            )
