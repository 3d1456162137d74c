"""The pure reader-group rules: what a configuration must satisfy (Pravega's
ReaderGroupConfig builder), the names derived from a group, and which streams an update
unsubscribes."""

from __future__ import annotations

import uuid

import pytest

from app.domain.errors import InvalidInput
from app.domain.readergroups import (
    ReaderGroupConfig,
    ScopedStream,
    StreamDataRetention,
    is_subscriber_transition,
    is_valid_reader_group_name,
    parse_reader_group_id,
    reader_group_stream,
    streams_to_unsubscribe,
    subscriber_name,
    unique_cuts,
)

A, B, C = ScopedStream("sc", "a"), ScopedStream("sc", "b"), ScopedStream("other", "c")
NONE = StreamDataRetention.NONE
MANUAL = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
AUTOMATIC = StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT


def config(*streams: ScopedStream, retention: StreamDataRetention = NONE) -> ReaderGroupConfig:
    return ReaderGroupConfig({s: {} for s in streams}, retention=retention)


def test_retention_ordinals_are_the_wire_values() -> None:
    assert [int(r) for r in (NONE, MANUAL, AUTOMATIC)] == [0, 1, 2]
    assert StreamDataRetention.of(2) is AUTOMATIC
    with pytest.raises(InvalidInput):
        StreamDataRetention.of(3)
    with pytest.raises(InvalidInput):
        StreamDataRetention.of(-1)


def test_a_valid_configuration() -> None:
    ReaderGroupConfig(
        {A: {0: 5, 1: -1}, B: {}},
        {A: {0: 9, 1: -1, 2: 0}, B: {3: 4}},
        max_outstanding_checkpoint_request=1,
    ).validate()


@pytest.mark.parametrize(
    ("cfg", "reason"),
    [
        (ReaderGroupConfig({}), "no starting stream cuts"),
        (ReaderGroupConfig({A: {}}, max_outstanding_checkpoint_request=0), "greater than zero"),
        (ReaderGroupConfig({A: {}}, max_outstanding_checkpoint_request=-3), "greater than zero"),
        (ReaderGroupConfig({ScopedStream("", "a"): {}}), "no scope"),
        (ReaderGroupConfig({A: {}}, {B: {0: 1}}), "no starting stream cut"),
        (ReaderGroupConfig({A: {0: 5}}, {A: {0: 4}}), "after its end"),
        (ReaderGroupConfig({A: {0: -1}}, {A: {0: 4}}), "starts at the tail"),
        (ReaderGroupConfig({A: {3: 0}}, {A: {1: 4}}), "precede"),
        (ReaderGroupConfig({A: {1: 0, 5: 0}}, {A: {1: 4, 2: 0}}), "precede"),
    ],
)
def test_invalid_configurations(cfg: ReaderGroupConfig, reason: str) -> None:
    with pytest.raises(InvalidInput, match=reason):
        cfg.validate()


def test_an_unbounded_start_or_end_skips_the_order_check() -> None:
    ReaderGroupConfig({A: {}}, {A: {0: 1}}).validate()
    ReaderGroupConfig({A: {0: 9}}, {A: {}}).validate()
    ReaderGroupConfig({A: {0: 9}}, {A: {0: -1}}).validate()  # the end at the tail


def test_a_stream_named_twice_is_refused() -> None:
    assert unique_cuts([(A, {0: 1}), (B, {})], "cuts") == {A: {0: 1}, B: {}}
    with pytest.raises(InvalidInput, match="twice"):
        unique_cuts([(A, {0: 1}), (A, {})], "starting stream cuts")


def test_names() -> None:
    assert subscriber_name("sc", "rg") == "sc/rg"
    assert reader_group_stream("rg") == "_RGrg"
    assert str(C) == "other/c" and ScopedStream.parse("other/c") == C
    for bad in ("nostream", "/x", "x/", "a/b/c"):
        with pytest.raises(InvalidInput):
            ScopedStream.parse(bad)
    assert is_valid_reader_group_name("a.b-C9") and is_valid_reader_group_name("x" * 250)
    for bad in ("", "a_b", "_RGa", "a/b", "x" * 251):
        assert not is_valid_reader_group_name(bad)


def test_reader_group_ids() -> None:
    some = uuid.uuid4()
    assert parse_reader_group_id(str(some)) == some
    for bad in ("", "x", "1234"):
        with pytest.raises(InvalidInput):
            parse_reader_group_id(bad)


@pytest.mark.parametrize(
    ("old", "new", "transition", "removed"),
    [
        (config(A, B), config(A), False, (B,)),  # NONE -> NONE: no subscriber work at all
        (config(A, B), config(C, retention=MANUAL), True, ()),  # becoming a subscriber
        (config(A, B, retention=AUTOMATIC), config(A, B), True, (A, B)),  # ceasing to be one
        (config(A, B, retention=AUTOMATIC), config(B, C, retention=MANUAL), True, (A,)),
        (config(A, retention=MANUAL), config(A, retention=MANUAL), True, ()),
    ],
)
def test_what_an_update_unsubscribes(
    old: ReaderGroupConfig,
    new: ReaderGroupConfig,
    transition: bool,
    removed: tuple[ScopedStream, ...],
) -> None:
    assert is_subscriber_transition(old, new) is transition
    assert streams_to_unsubscribe(old, new) == removed
