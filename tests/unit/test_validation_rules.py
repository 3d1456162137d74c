"""The validation layer's rules (app/domain/validation.py, names.py) without a server: each bound
accepts its edge and refuses one past it, and whatever is accepted stays inside a bigint after
the arithmetic the controller does on it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.validation import check_strings
from app.domain.autoscale import scale_up
from app.domain.errors import InvalidInput
from app.domain.kvtables import KvtConfig
from app.domain.limits import (
    MAX_BYTES,
    MAX_DURATION_MS,
    MAX_SCALE_FACTOR,
    MAX_SEGMENTS_PER_EPOCH,
    MAX_TIMESTAMP_MS,
    NO_TIMESTAMP,
    UNBOUNDED_RETENTION,
)
from app.domain.names import require_not_internal_scope, require_stream_name, require_text, validate_tags
from app.domain.records import (
    EpochRecord,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    SegmentRecord,
    StreamConfig,
)
from app.domain.validation import (
    check_epoch_size,
    check_ping_lease,
    check_scale_request,
    check_timestamp,
    check_truncation_cut,
    check_writer_timestamp,
    is_writer_time,
)

BIGINT_MAX = 2**63 - 1
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(INT64)
def test_an_accepted_timestamp_survives_the_controllers_arithmetic(value: int) -> None:
    try:
        check_timestamp("t", value)
    except InvalidInput:
        assert value < 0 or value > MAX_TIMESTAMP_MS
        return
    # A scale's next epoch is time + 1; a lease or a validity window adds at most a duration.
    assert value + 1 + MAX_DURATION_MS <= BIGINT_MAX


@settings(max_examples=200, deadline=None, derandomize=True)
@given(INT64)
def test_writer_times_are_refused_only_past_the_timestamp_bound(value: int) -> None:
    assert is_writer_time(value) == (value <= MAX_TIMESTAMP_MS)


def test_timestamp_edges() -> None:
    check_timestamp("t", 0)
    check_timestamp("t", MAX_TIMESTAMP_MS)
    for bad in (-1, MAX_TIMESTAMP_MS + 1, BIGINT_MAX):
        with pytest.raises(InvalidInput, match="t must be between 0 and"):
            check_timestamp("t", bad)
    check_writer_timestamp("timestamp", NO_TIMESTAMP)
    with pytest.raises(InvalidInput):
        check_writer_timestamp("timestamp", BIGINT_MAX)


def test_scaling_policy_bounds() -> None:
    ScalingPolicy.fixed(MAX_SEGMENTS_PER_EPOCH).validate()
    for bad in (0, -1, MAX_SEGMENTS_PER_EPOCH + 1, 2**31 - 1):
        with pytest.raises(InvalidInput, match="minNumSegments"):
            ScalingPolicy.fixed(bad).validate()
    by_rate = ScaleType.BY_RATE_IN_KBYTES_PER_SEC
    ScalingPolicy(by_rate, 1, MAX_SCALE_FACTOR, 1).validate()
    with pytest.raises(InvalidInput, match="scaleFactor"):
        ScalingPolicy(by_rate, 1, MAX_SCALE_FACTOR + 1, 1).validate()
    with pytest.raises(InvalidInput, match="targetRate"):
        ScalingPolicy(by_rate, 0, 2, 1).validate()
    # A fixed policy's rates are ignored, as Pravega ignores them.
    ScalingPolicy(ScaleType.FIXED_NUM_SEGMENTS, -5, 2**31 - 1, 3).validate()


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (RetentionPolicy(RetentionType.SIZE, 100, 50), "retentionMax"),
        (RetentionPolicy(RetentionType.TIME, 10, 0), "retentionMax"),
        (RetentionPolicy(RetentionType.TIME, BIGINT_MAX, UNBOUNDED_RETENTION), "retentionParam"),
        (RetentionPolicy(RetentionType.TIME, MAX_DURATION_MS + 1, UNBOUNDED_RETENTION), "retentionParam"),
        (RetentionPolicy(RetentionType.SIZE, MAX_BYTES + 1, UNBOUNDED_RETENTION), "retentionParam"),
        (RetentionPolicy(RetentionType.SIZE, 1, MAX_BYTES + 1), "retentionMax"),
        (RetentionPolicy(RetentionType.SIZE, -1, 5), "retentionParam"),
    ],
)
def test_retention_nonsense_is_refused(policy: RetentionPolicy, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        policy.validate()


def test_retention_edges_are_accepted() -> None:
    RetentionPolicy(RetentionType.TIME, MAX_DURATION_MS, UNBOUNDED_RETENTION).validate()
    RetentionPolicy(RetentionType.TIME, 5, 5).validate()
    RetentionPolicy(RetentionType.SIZE, MAX_BYTES, MAX_BYTES).validate()
    RetentionPolicy(RetentionType.SIZE, 0, 0).validate()


def test_stream_limits_and_tags() -> None:
    with pytest.raises(InvalidInput, match="tag must not be empty"):
        StreamConfig(ScalingPolicy.fixed(1), tags=("",)).validate()
    with pytest.raises(InvalidInput, match="timestampAggregationTimeout"):
        StreamConfig(ScalingPolicy.fixed(1), timestamp_aggregation_timeout=BIGINT_MAX).validate()
    with pytest.raises(InvalidInput, match="rolloverSizeBytes"):
        StreamConfig(ScalingPolicy.fixed(1), rollover_size_bytes=BIGINT_MAX).validate()
    with pytest.raises(InvalidInput, match="NUL"):
        validate_tags(("a\x00",))
    StreamConfig(ScalingPolicy.fixed(1), tags=("x" * 255,), rollover_size_bytes=MAX_BYTES).validate()


def test_scale_request_bounds() -> None:
    check_scale_request([0], [(0.0, 1.0)] * MAX_SEGMENTS_PER_EPOCH, 0)
    with pytest.raises(InvalidInput, match="at most"):
        check_scale_request([0], [(0.0, 1.0)] * (MAX_SEGMENTS_PER_EPOCH + 1), 0)
    with pytest.raises(InvalidInput, match="scaleTimestamp"):
        check_scale_request([0], [(0.0, 1.0)], BIGINT_MAX)
    with pytest.raises(InvalidInput, match="sealedSegments"):
        check_scale_request([-1], [(0.0, 1.0)], 0)
    check_epoch_size(MAX_SEGMENTS_PER_EPOCH, [1, 1], 1)  # a repeated id seals one segment
    with pytest.raises(InvalidInput, match="epoch"):
        check_epoch_size(MAX_SEGMENTS_PER_EPOCH, [1], 2)


def test_truncation_cuts_and_leases() -> None:
    check_truncation_cut({0: 0, 1: MAX_BYTES})
    with pytest.raises(InvalidInput, match="negative"):
        check_truncation_cut({0: -1})
    with pytest.raises(InvalidInput):
        check_truncation_cut({0: MAX_BYTES + 1})
    check_ping_lease(1)
    for bad in (0, -1, -(2**63)):
        with pytest.raises(InvalidInput, match="lease"):
            check_ping_lease(bad)


def test_kvt_partitions_are_bounded_like_an_epoch() -> None:
    KvtConfig(MAX_SEGMENTS_PER_EPOCH, 4, 0, 0).validate()
    with pytest.raises(InvalidInput, match="partitionCount"):
        KvtConfig(MAX_SEGMENTS_PER_EPOCH + 1, 4, 0, 0).validate()


def test_names() -> None:
    require_stream_name("_RGgroup")
    for bad in ("a b", "a/b", "x" * 256, "é"):
        with pytest.raises(InvalidInput, match="invalid stream name"):
            require_stream_name(bad)
    with pytest.raises(InvalidInput, match="NUL"):
        require_text("writer id", "w\x00")
    with pytest.raises(InvalidInput, match="_system"):
        require_not_internal_scope("_system")
    require_not_internal_scope("system")


def test_the_grpc_gate_finds_nul_at_any_depth() -> None:
    check_strings(pb.StreamConfig(streamInfo=pb.StreamInfo(scope="sc", stream="s"), tags=pb.Tags(tag=["a"])))
    nested = [
        pb.StreamConfig(tags=pb.Tags(tag=["a", "b\x00"])),
        pb.ReaderGroupConfiguration(
            scope="sc",
            readerGroupName="rg",
            startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope="sc", stream="s\x00"))],
        ),
        pb.TimestampFromWriter(writer="w\x00"),
        pb.KeyValueTableConfig(scope="sc", kvtName="\x00"),
    ]
    for message in nested:
        with pytest.raises(InvalidInput, match="NUL"):
            check_strings(message)


def _epoch_of(count: int) -> EpochRecord:
    width = 1.0 / count
    segments = tuple(
        SegmentRecord(i, 0, 0, i * width, 1.0 if i == count - 1 else (i + 1) * width) for i in range(count)
    )
    return EpochRecord(0, 0, segments, 0)


def test_an_auto_scale_split_keeps_the_epoch_within_the_bound() -> None:
    policy = ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 10, MAX_SCALE_FACTOR, 1)
    assert scale_up(0, MAX_SCALE_FACTOR, policy, _epoch_of(MAX_SEGMENTS_PER_EPOCH)) is None
    decision = scale_up(0, MAX_SCALE_FACTOR, policy, _epoch_of(MAX_SEGMENTS_PER_EPOCH - 2))
    assert decision is not None and len(decision.new_ranges) == 3
    small = scale_up(0, 4, policy, _epoch_of(2))
    assert small is not None and len(small.new_ranges) == 4
