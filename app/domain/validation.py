"""The checks every client-given number passes before anything is written: stream configs, scale
requests, stream cuts, leases and timestamps, against the bounds in app/domain/limits.py. Pure
functions raising InvalidInput with a message in the caller's terms; gRPC and REST share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from app.domain.errors import InvalidInput
from app.domain.limits import (
    MAX_BYTES,
    MAX_DURATION_MS,
    MAX_SCALE_FACTOR,
    MAX_SEGMENTS_PER_EPOCH,
    MAX_TARGET_RATE,
    MAX_TIMESTAMP_MS,
    MAX_WRITER_ID_LENGTH,
    UNBOUNDED_RETENTION,
)
from app.domain.names import require_text

INT64_MAX = 2**63 - 1


def check_range(field: str, value: int, low: int, high: int, why: str = "") -> None:
    if not low <= value <= high:
        reason = f" ({why})" if why else ""
        raise InvalidInput(f"{field} must be between {low} and {high}, got {value}{reason}")


# --- times ---------------------------------------------------------------------------------------


def check_timestamp(field: str, value: int) -> None:
    """A point in time in ms since the Unix epoch, 0 (unset) up to 9999-12-31."""
    check_range(field, value, 0, MAX_TIMESTAMP_MS, "milliseconds since 1970, at most year 9999")


def is_writer_time(value: int) -> bool:
    """A writer's time: anything up to 9999-12-31. Negative values stay accepted as Pravega takes
    them (Long.MIN_VALUE is the clients' "no timestamp" on commit); only a time no later time
    could follow, or whose + 1 overflows, is refused."""
    return value <= MAX_TIMESTAMP_MS


def check_writer_timestamp(field: str, value: int) -> None:
    if not is_writer_time(value):
        raise InvalidInput(f"{field} must be at most {MAX_TIMESTAMP_MS} (year 9999), got {value}")


def check_duration(field: str, value: int) -> None:
    check_range(field, value, 0, MAX_DURATION_MS, "milliseconds")


# --- stream configuration ------------------------------------------------------------------------


def check_segment_count(field: str, count: int) -> None:
    check_range(field, count, 1, MAX_SEGMENTS_PER_EPOCH, "segments in one epoch")


def check_scaling(kind: str, fixed: bool, target_rate: int, scale_factor: int, min_segments: int) -> None:
    """A ScalingPolicy: 1..MAX segments; a rate policy also needs a positive rate and a factor
    whose split stays within one epoch's segment bound. A fixed policy's rates are ignored."""
    check_segment_count("minNumSegments", min_segments)
    if fixed:
        return
    if target_rate <= 0:
        raise InvalidInput(f"targetRate must be positive for {kind}, got {target_rate}")
    check_range("targetRate", target_rate, 1, MAX_TARGET_RATE)
    if scale_factor <= 0:
        raise InvalidInput(f"scaleFactor must be positive for {kind}, got {scale_factor}")
    check_range("scaleFactor", scale_factor, 1, MAX_SCALE_FACTOR, "pieces one auto-scale split may make")


def check_retention(time_based: bool, param: int, maximum: int) -> None:
    """A RetentionPolicy: the minimum within the duration or byte bound; the maximum either
    Long.MAX_VALUE (no maximum, what clients send by default) or within the same bound and not
    below the minimum."""
    if param < 0:
        raise InvalidInput(f"retentionParam must not be negative, got {param}")
    if maximum < 0:
        raise InvalidInput(f"retentionMax must not be negative, got {maximum}")
    if time_based:
        check_range("retentionParam", param, 0, MAX_DURATION_MS, "milliseconds of retention")
    else:
        check_range("retentionParam", param, 0, MAX_BYTES, "bytes of retention")
    if maximum == UNBOUNDED_RETENTION:
        return
    bound = MAX_DURATION_MS if time_based else MAX_BYTES
    check_range("retentionMax", maximum, 0, bound, f"or {UNBOUNDED_RETENTION} for no maximum")
    if maximum < param:
        raise InvalidInput(f"retentionMax ({maximum}) must not be below retentionParam ({param})")


def check_stream_limits(timestamp_aggregation_timeout: int, rollover_size_bytes: int) -> None:
    if timestamp_aggregation_timeout < 0:
        raise InvalidInput("timestampAggregationTimeout must not be negative")
    check_duration("timestampAggregationTimeout", timestamp_aggregation_timeout)
    if rollover_size_bytes < 0:
        raise InvalidInput("rolloverSizeBytes must not be negative")
    check_range("rolloverSizeBytes", rollover_size_bytes, 0, MAX_BYTES)


# --- scale requests ------------------------------------------------------------------------------


def check_scale_request(
    sealed: Sequence[int], new_ranges: Sequence[tuple[float, float]], timestamp: int
) -> None:
    """What a manual scale may ask before its stream is read: a time inside the timestamp bound
    (0 means "now"), and no more new segments than an epoch may hold."""
    check_timestamp("scaleTimestamp", timestamp)
    check_scale_counts(len(sealed), len(new_ranges))
    for segment in sealed:
        check_range("sealedSegments", segment, 0, INT64_MAX, "segment ids")


def check_scale_counts(sealed: int, new: int) -> None:
    """At most MAX_SEGMENTS_PER_EPOCH segments sealed or created by one scale; adapters call this
    on the counts alone, before converting a large request."""
    if new > MAX_SEGMENTS_PER_EPOCH:
        raise InvalidInput(f"a scale may create at most {MAX_SEGMENTS_PER_EPOCH} segments, got {new}")
    if sealed > MAX_SEGMENTS_PER_EPOCH:
        raise InvalidInput(f"a scale may seal at most {MAX_SEGMENTS_PER_EPOCH} segments, got {sealed}")


def check_epoch_size(active: int, sealed: Iterable[int], new_count: int) -> None:
    """The epoch a scale would make holds at most MAX_SEGMENTS_PER_EPOCH segments."""
    after = active - len(set(sealed)) + new_count
    if after > MAX_SEGMENTS_PER_EPOCH:
        raise InvalidInput(
            f"the scale would leave {after} segments in the stream's epoch; at most "
            f"{MAX_SEGMENTS_PER_EPOCH} are allowed"
        )


# --- stream cuts, leases, writers ----------------------------------------------------------------


def check_truncation_cut(cut: Mapping[int, int]) -> None:
    """A cut to truncate at names real positions: offsets from 0 (a future segment's marker,
    a negative offset, means nothing to truncation)."""
    if len(cut) > MAX_SEGMENTS_PER_EPOCH:
        raise InvalidInput(f"a stream cut may name at most {MAX_SEGMENTS_PER_EPOCH} segments, got {len(cut)}")
    for segment, offset in cut.items():
        check_range("stream cut segment id", segment, 0, INT64_MAX)
        if offset < 0:
            raise InvalidInput(f"offset {offset} of segment {segment} must not be negative in a truncation")
        check_range(f"offset of segment {segment}", offset, 0, MAX_BYTES, "bytes")


def check_ping_lease(lease_ms: int) -> None:
    """A ping's lease extends the transaction by that much from now: zero or less would end it
    at once, so it is refused rather than answered OK and aborted a moment later."""
    if lease_ms <= 0:
        raise InvalidInput(f"lease must be a positive number of milliseconds, got {lease_ms}")


def check_writer_id(writer: str) -> None:
    require_text("writer id", writer)
    if len(writer) > MAX_WRITER_ID_LENGTH:
        raise InvalidInput(f"writer id may be at most {MAX_WRITER_ID_LENGTH} characters, got {len(writer)}")
