"""JSON <-> domain conversion for Pravega's REST models (Create/UpdateStreamRequest, ScalingConfig,
RetentionConfig, StreamProperty, StreamState, ScaleMetadata), our transaction views, and the strict
checks behind every 400."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from app.api.rest.http import json_type_name
from app.domain.errors import InvalidInput
from app.domain.names import (
    INTERNAL_NAME_PREFIX,
    MAX_TAGS,
    is_valid_scope_or_stream_name,
    is_valid_user_name,
)
from app.domain.records import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamConfig
from app.domain.txns import TxnId, TxnRecord
from app.ports import TxnLookup
from app.services.history import ScalingEvent

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Java's Long.MAX_VALUE: what RetentionPolicy.bySizeBytes(n) and byTime(d) store as "no maximum".
UNBOUNDED = INT64_MAX

MB = 1024 * 1024
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

LIMITED_DAYS = "LIMITED_DAYS"
LIMITED_SIZE_MB = "LIMITED_SIZE_MB"
_SCALE_TYPES = tuple(t.name for t in ScaleType)
_RETENTION_TYPES = (LIMITED_DAYS, LIMITED_SIZE_MB)


class Fields:
    """Typed reads of one JSON object. JSON null counts as absent (Jackson reads both as null);
    unknown members are ignored, as Pravega's object mapper ignores them."""

    def __init__(self, obj: Mapping[str, Any], where: str = "") -> None:
        self._obj = obj
        self._where = where

    def label(self, name: str) -> str:
        return f"{self._where}.{name}" if self._where else name

    def _get(self, name: str, expected: str, kind: type) -> Any:
        value = self._obj.get(name)
        if value is None:
            return None
        # No field takes a boolean, and bool is an int to Python but not to JSON.
        if isinstance(value, bool) or not isinstance(value, kind):
            raise InvalidInput(f"{self.label(name)} must be {expected}, got {json_type_name(value)}")
        return value

    def _missing(self, name: str) -> InvalidInput:
        return InvalidInput(f"{self.label(name)} is required")

    def string(self, name: str) -> str | None:
        value: str | None = self._get(name, "a string", str)
        return value

    def required_string(self, name: str) -> str:
        value = self.string(name)
        if value is None:
            raise self._missing(name)
        return value

    def integer(self, name: str, *, minimum: int, maximum: int) -> int | None:
        value: int | None = self._get(name, "an integer", int)
        if value is not None and not minimum <= value <= maximum:
            raise InvalidInput(f"{self.label(name)} must be between {minimum} and {maximum}, got {value}")
        return value

    def required_integer(self, name: str, *, minimum: int, maximum: int) -> int:
        value = self.integer(name, minimum=minimum, maximum=maximum)
        if value is None:
            raise self._missing(name)
        return value

    def required_choice(self, name: str, choices: Collection[str]) -> str:
        value = self.required_string(name)
        if value not in choices:
            raise InvalidInput(f"{self.label(name)} must be one of {', '.join(choices)}, got {value!r}")
        return value

    def object(self, name: str) -> Fields | None:
        value: dict[str, Any] | None = self._get(name, "an object", dict)
        return None if value is None else Fields(value, self.label(name))

    def required_object(self, name: str) -> Fields:
        value = self.object(name)
        if value is None:
            raise self._missing(name)
        return value

    def strings(self, name: str) -> list[str]:
        values: list[Any] | None = self._get(name, "an array of strings", list)
        if values is None:
            return []
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise InvalidInput(f"{self.label(name)}[{i}] must be a string, got {json_type_name(value)}")
        return values


# --- names ------------------------------------------------------------------------------


def is_valid_user_scope_name(name: str) -> bool:
    """Pravega's REST layer takes only user names: no leading underscore, at most 255 chars."""
    return is_valid_scope_or_stream_name(name) and not name.startswith(INTERNAL_NAME_PREFIX)


def scope_name_from_json(body: Mapping[str, Any]) -> str:
    name = Fields(body).required_string("scopeName")
    if not is_valid_user_scope_name(name):
        raise InvalidInput(f"invalid scope name {name!r}: use 1-255 of a-z, A-Z, 0-9, '.', '-'")
    return name


def stream_name_from_json(body: Mapping[str, Any]) -> str:
    name = Fields(body).required_string("streamName")
    if not is_valid_user_name(name):
        raise InvalidInput(f"invalid stream name {name!r}: use 1-250 of a-z, A-Z, 0-9, '.', '-'")
    return name


# --- request -> StreamConfig ------------------------------------------------------------


def stream_config_from_json(body: Mapping[str, Any]) -> StreamConfig:
    """Maps a CreateStreamRequest as Pravega's ModelHelper.getCreateStreamConfig does, but a
    request the mapping cannot honour is a 400 here where Java throws (a 500). An
    UpdateStreamRequest is the same body without streamName, and maps the same way (Java's
    getUpdateStreamConfig drops the retention maximum; we keep it, as on create)."""
    fields = Fields(body)
    scaling = _scaling_from_json(fields.required_object("scalingPolicy"))
    retention_fields = fields.object("retentionPolicy")
    retention = None if retention_fields is None else _retention_from_json(retention_fields)
    tags = fields.strings("streamTags")
    # Counted as sent, before duplicates collapse, as the gRPC API counts them.
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a stream may carry at most {MAX_TAGS} tags, got {len(tags)}")
    timeout = fields.integer("timestampAggregationTimeout", minimum=0, maximum=INT64_MAX)
    rollover = fields.integer("rolloverSizeBytes", minimum=0, maximum=INT64_MAX)
    config = StreamConfig(
        scaling=scaling,
        retention=retention,
        tags=tuple(tags),
        timestamp_aggregation_timeout=timeout or 0,
        rollover_size_bytes=rollover or 0,
    )
    config.validate()
    return config


def _scaling_from_json(fields: Fields) -> ScalingPolicy:
    scale_type = ScaleType[fields.required_choice("type", _SCALE_TYPES)]
    min_segments = fields.required_integer("minSegments", minimum=1, maximum=INT32_MAX)
    if scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        # Java ignores the rates of a fixed policy; Jackson still refuses ill-typed ones.
        fields.integer("targetRate", minimum=-INT32_MAX - 1, maximum=INT32_MAX)
        fields.integer("scaleFactor", minimum=-INT32_MAX - 1, maximum=INT32_MAX)
        return ScalingPolicy.fixed(min_segments)
    target_rate = fields.required_integer("targetRate", minimum=1, maximum=INT32_MAX)
    scale_factor = fields.required_integer("scaleFactor", minimum=1, maximum=INT32_MAX)
    return ScalingPolicy(scale_type, target_rate, scale_factor, min_segments)


def _retention_from_json(fields: Fields) -> RetentionPolicy:
    kind = fields.required_choice("type", _RETENTION_TYPES)
    value = fields.integer("value", minimum=0, maximum=INT64_MAX)
    max_value = fields.integer("maxValue", minimum=0, maximum=INT64_MAX)
    time_based = _time_based_ms(fields, "timeBasedRetention")
    max_time_based = _time_based_ms(fields, "maxTimeBasedRetention")
    if kind == LIMITED_SIZE_MB:
        if value is None:
            raise InvalidInput(f"{fields.label('value')} is required for {LIMITED_SIZE_MB}")
        param = _product(value, MB, fields.label("value"))
        maximum = UNBOUNDED if max_value is None else _product(max_value, MB, fields.label("maxValue"))
        return RetentionPolicy(RetentionType.SIZE, param, maximum)
    if value is None and time_based is None:
        raise InvalidInput(
            f"{fields.label('value')} or {fields.label('timeBasedRetention')} is required for {LIMITED_DAYS}"
        )
    param = _days_or_time_based(value or 0, time_based, fields.label("value"))
    if max_value is None and max_time_based is None:
        maximum = UNBOUNDED
    else:
        maximum = _days_or_time_based(max_value or 0, max_time_based, fields.label("maxValue"))
    return RetentionPolicy(RetentionType.TIME, param, maximum)


def _days_or_time_based(days: int, time_based_ms: int | None, label: str) -> int:
    # Java's rule: the {days, hours, minutes} form counts only when the plain day count is 0.
    if time_based_ms is not None and days == 0:
        return time_based_ms
    return _product(days, DAY_MS, label)


def _time_based_ms(parent: Fields, name: str) -> int | None:
    fields = parent.object(name)
    if fields is None:
        return None
    total = 0
    for unit, unit_ms in (("days", DAY_MS), ("hours", HOUR_MS), ("minutes", MINUTE_MS)):
        count = fields.integer(unit, minimum=0, maximum=INT64_MAX) or 0
        total += _product(count, unit_ms, fields.label(unit))
    if total > INT64_MAX:
        raise InvalidInput(f"{parent.label(name)} is longer than {INT64_MAX} ms")
    return total


def _product(value: int, unit: int, label: str) -> int:
    # Java's long arithmetic would wrap silently here; we refuse instead.
    if value * unit > INT64_MAX:
        raise InvalidInput(f"{label} is too large: {value} x {unit} exceeds {INT64_MAX}")
    return value * unit


# --- UpdateStreamStateRequest, scaling-events query -------------------------------------

SEALED = "SEALED"
# Up to 19 significant digits: anything longer is outside Java's long, and int() of a huge
# string is slow enough to matter.
_QUERY_LONG = re.compile(r"[+-]?0*[0-9]{1,19}")


def stream_state_from_json(body: Mapping[str, Any]) -> str:
    """Pravega's StreamState enum has one value; any other, or none, is its 400."""
    return Fields(body).required_choice("streamState", (SEALED,))


def scaling_window_from_query(query: Mapping[str, str]) -> tuple[int, int]:
    """`from` and `to`: both required, each a non-negative long, as Pravega's resource checks
    them. Whether from <= to is the history service's rule."""
    return _query_ms(query, "from"), _query_ms(query, "to")


def _query_ms(query: Mapping[str, str], name: str) -> int:
    raw = query.get(name)
    if raw is None:
        raise InvalidInput(f"query parameter {name!r} is required: milliseconds since the Unix epoch")
    value = int(raw) if _QUERY_LONG.fullmatch(raw) else -1
    if not 0 <= value <= INT64_MAX:
        raise InvalidInput(f"query parameter {name!r} must be an integer from 0 to {INT64_MAX}, got {raw!r}")
    return value


# --- StreamConfig -> StreamProperty -----------------------------------------------------


def stream_property(scope: str, name: str, config: StreamConfig) -> dict[str, Any]:
    """Pravega's ModelHelper.encodeStreamResponse, plus the retention maximum when one is set
    (Pravega drops it, so a bounded policy would read back as unbounded)."""
    prop: dict[str, Any] = {
        "scopeName": scope,
        "streamName": name,
        "scalingPolicy": _scaling_json(config.scaling),
    }
    if config.retention is not None:
        prop["retentionPolicy"] = _retention_json(config.retention)
    prop["tags"] = list(config.tags)
    prop["timestampAggregationTimeout"] = config.timestamp_aggregation_timeout
    prop["rolloverSizeBytes"] = config.rollover_size_bytes
    return prop


def _scaling_json(scaling: ScalingPolicy) -> dict[str, Any]:
    if scaling.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return {"type": scaling.scale_type.name, "minSegments": scaling.min_num_segments}
    return {
        "type": scaling.scale_type.name,
        "targetRate": scaling.target_rate,
        "scaleFactor": scaling.scale_factor,
        "minSegments": scaling.min_num_segments,
    }


def _retention_json(retention: RetentionPolicy) -> dict[str, Any]:
    bounded = retention.retention_max != UNBOUNDED
    if retention.retention_type == RetentionType.SIZE:
        out: dict[str, Any] = {"type": LIMITED_SIZE_MB, "value": retention.retention_param // MB}
        if bounded:
            out["maxValue"] = retention.retention_max // MB
        return out
    days, time_based = _split_duration(retention.retention_param)
    out = {"type": LIMITED_DAYS, "value": days, "timeBasedRetention": time_based}
    if bounded:
        out["maxValue"], out["maxTimeBasedRetention"] = _split_duration(retention.retention_max)
    return out


def _split_duration(ms: int) -> tuple[int, dict[str, int]]:
    """(value, timeBasedRetention) as Java reports them: a whole number of days fills both;
    anything finer sets value to 0 and spells days/hours/minutes out (seconds are dropped)."""
    days, rest = divmod(ms, DAY_MS)
    hours, rest = divmod(rest, HOUR_MS)
    minutes = rest // MINUTE_MS
    value = days if ms == days * DAY_MS else 0
    return value, {"days": days, "hours": hours, "minutes": minutes}


# --- ScalingEvent -> ScaleMetadata ------------------------------------------------------


def scale_metadata(events: Sequence[ScalingEvent]) -> list[dict[str, Any]]:
    """What Pravega's resource actually serves: its store's ScaleMetadata and Segment as Jackson
    writes them (the swagger's ScalingEventList/segmentList/startTime shape is never served).
    Its splits and merges count the change from the epoch listed before (0 for the first), while
    an epoch record carries running totals, as Pravega's EpochRecord does: hence the difference."""
    totals = [(event.splits, event.merges) for event in events]
    before = totals[:1] + totals[:-1]
    return [
        _scale_metadata(event, event.splits - splits, event.merges - merges)
        for event, (splits, merges) in zip(events, before, strict=True)
    ]


def _scale_metadata(event: ScalingEvent, splits: int, merges: int) -> dict[str, Any]:
    return {
        "timestamp": event.timestamp,
        "segments": [
            {
                "number": segment.number,
                "epoch": segment.creation_epoch,
                "start": segment.creation_time,
                "keyStart": float(segment.key_start),
                "keyEnd": float(segment.key_end),
            }
            for segment in event.segments
        ],
        "splits": splits,
        "merges": merges,
    }


# --- transactions (our extension) -------------------------------------------------------


def txn_record_json(record: TxnRecord) -> dict[str, Any]:
    """An active transaction. Members without a value (no writer, not committing) are left
    out rather than sent as null."""
    out: dict[str, Any] = {
        "txnId": str(record.txn),
        "epoch": record.epoch,
        "status": record.status.value,
        "creationTime": record.creation_time,
        "leaseMs": record.lease_ms,
        "leaseExpiry": record.lease_expiry,
        "maxExecutionExpiry": record.max_exec_expiry,
    }
    if record.writer_id is not None:
        out["writerId"] = record.writer_id
    if record.commit_time is not None:
        out["commitTime"] = record.commit_time
    if record.commit_order is not None:
        out["commitOrder"] = record.commit_order
    return out


def txn_state_json(txn: TxnId, lookup: TxnLookup) -> dict[str, Any]:
    """What is known of one id: the active record's fields while it is active, the completion
    time once completed, only the id, its epoch and UNKNOWN otherwise."""
    if lookup.active is not None:
        return txn_record_json(lookup.active.value)
    out: dict[str, Any] = {"txnId": str(txn), "epoch": txn.epoch, "status": lookup.status.value}
    if lookup.completed is not None:
        out["completionTime"] = lookup.completed.completion_time
    return out
