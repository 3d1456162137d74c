"""The key-value table client's pure parts: keys hashed to segments exactly as Pravega's Java
client hashes them, key serialization, the iteration successor, versions.

The expected fractions were computed with Guava 32's Hashing.murmur3_128(seed).hashBytes(key)
.asLong() and HashHelper.longToDoubleFraction's arithmetic, seed "KeyValueTableRouter".hashCode().
"""

from __future__ import annotations

import pytest

from app.kvtclient.errors import InvalidKey
from app.kvtclient.model import KeyLayout, TableKey, Version, successor
from app.kvtclient.routing import (
    ROUTER_SEED,
    KvtSegments,
    SegmentRange,
    hash_to_range,
    long_to_double_fraction,
)

JAVA_FRACTIONS = [
    (b"", 0.42352702020022215),
    (b"a", 0.6272098046731807),
    (b"key-0001", 0.6741219186027629),
    (b"0123456789abcdef", 0.3339020757249709),
    (b"0123456789abcdef0", 0.18124613624537522),
    (b"primary!", 0.2344017443022628),
    (bytes([0xFF, 0x80, *range(21), 0xFE]), 0.550314945111005),
    (b"user0000", 0.9240483276488267),
    (b"user0002", 0.41935681335909636),
    (b"user0003", 0.11261560661143522),
]


def test_the_seed_is_javas_string_hash_of_the_router_name() -> None:
    assert ROUTER_SEED == -2020233499


@pytest.mark.parametrize(("key", "fraction"), JAVA_FRACTIONS)
def test_a_primary_key_hashes_to_the_fraction_javas_client_computes(key: bytes, fraction: float) -> None:
    assert hash_to_range(key) == fraction


def test_long_to_double_fraction_matches_hash_helper() -> None:
    # HashHelperTest's cases: the reversed small numbers are binary fractions.
    assert long_to_double_fraction(0) == 0.0
    assert long_to_double_fraction(-1) == pytest.approx(1.0, abs=1e-7)
    for n, expected in [(1, 0.5), (2, 0.25), (3, 0.75), (4, 0.125), (5, 0.625), (6, 0.375), (7, 0.875)]:
        reversed_n = int(f"{n:064b}"[::-1], 2)
        assert long_to_double_fraction(reversed_n) == pytest.approx(expected, abs=1e-7)


def thirds() -> KvtSegments:
    third = 1.0 / 3
    return KvtSegments(
        [
            SegmentRange(7, 2 * third, 3 * third),
            SegmentRange(5, 0.0, third),
            SegmentRange(6, third, 2 * third),
        ]
    )


def test_a_key_goes_to_the_segment_whose_range_holds_its_hash() -> None:
    segments = thirds()
    assert segments.segment_for(b"user0003").segment_id == 5  # 0.11
    assert segments.segment_for(b"user0002").segment_id == 6  # 0.42
    assert segments.segment_for(b"user0000").segment_id == 7  # 0.92
    assert segments.segment_for(b"0123456789abcdef").segment_id == 6  # 0.33390 > 1/3


def test_ranges_that_do_not_cover_the_key_space_are_refused() -> None:
    with pytest.raises(ValueError, match="do not cover"):
        KvtSegments([SegmentRange(0, 0.0, 0.5)])
    with pytest.raises(ValueError, match="at least one"):
        KvtSegments([])


def test_keys_serialize_as_primary_then_secondary_of_fixed_lengths() -> None:
    layout = KeyLayout(4, 2)
    assert layout.serialize(TableKey(b"abcd", b"xy")) == b"abcdxy"
    assert layout.deserialize(b"abcdxy") == TableKey(b"abcd", b"xy")
    with pytest.raises(InvalidKey, match="primary key of this table has 4 bytes, not 3"):
        layout.serialize(TableKey(b"abc", b"xy"))
    with pytest.raises(InvalidKey, match="secondary key of this table has 2 bytes, not 0"):
        layout.serialize(TableKey(b"abcd"))
    with pytest.raises(InvalidKey, match="no secondary keys"):
        KeyLayout(4, 0).serialize(TableKey(b"abcd", b"x"))


def test_the_successor_is_the_next_key_of_the_same_length() -> None:
    assert successor(b"\x00\x00") == b"\x00\x01"
    assert successor(b"\x00\xff") == b"\x01\x00"
    assert successor(b"a\xff\xff") == b"b\x00\x00"
    assert successor(b"\xff\xff") is None


def test_a_version_round_trips_through_its_text_form() -> None:
    version = Version(4294967297, 12)
    assert str(version) == "4294967297:12"
    assert Version.parse(str(version)) == version
    with pytest.raises(ValueError, match="not a key version"):
        Version.parse("12")
    with pytest.raises(ValueError, match="two integers"):
        Version.parse("a:b")
