"""Segment-to-container mapping checked against vectors printed by the real Guava and Pravega classes."""

import json
from pathlib import Path
from typing import Any

import pytest

from app.domain.containers import (
    consistent_hash,
    container_for_segment,
    java_string_hash,
    murmur3_128_as_long,
    segment_base_name,
)

_VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "container_vectors.json").read_text(encoding="ascii")
)
_SEED: int = _VECTORS["seed"]
_SEGMENTS: list[dict[str, Any]] = _VECTORS["segments"]
_COUNTS = (1, 4, 8, 16, 64, 1024)
_TXN = "00000001000000000000000000000005"


def test_seed_is_java_hash_of_mapper_name() -> None:
    assert java_string_hash(_VECTORS["seed_name"]) == _SEED


def test_java_string_hash_vectors() -> None:
    for entry in _VECTORS["java_hash"]:
        assert java_string_hash(entry["s"]) == entry["hash"], entry["s"]
    for entry in _SEGMENTS:
        assert java_string_hash(entry["name"]) == entry["java_hash"], entry["name"]


def test_murmur_vectors_cover_seeds_and_tail_lengths() -> None:
    for entry in _VECTORS["murmur"]:
        assert murmur3_128_as_long(entry["s"], entry["seed"]) == entry["as_long"], entry


def test_segment_base_name_vectors() -> None:
    for entry in _SEGMENTS:
        assert segment_base_name(entry["name"]) == entry["base_name"], entry["name"]


def test_base_name_hash_vectors() -> None:
    for entry in _SEGMENTS:
        assert murmur3_128_as_long(entry["base_name"], _SEED) == entry["base_hash"], entry["name"]


def test_consistent_hash_of_segment_hashes() -> None:
    for entry in _SEGMENTS:
        for count, expected in entry["hash_buckets"].items():
            assert consistent_hash(entry["base_hash"], int(count)) == expected, (entry["name"], count)


def test_container_for_segment_vectors() -> None:
    assert len(_SEGMENTS) >= 40
    for entry in _SEGMENTS:
        assert {int(k) for k in entry["containers"]} == set(_COUNTS)
        for count, expected in entry["containers"].items():
            assert container_for_segment(entry["name"], int(count)) == expected, (entry["name"], count)


def test_consistent_hash_raw_vectors() -> None:
    for entry in _VECTORS["consistent_hash"]:
        for buckets, expected in entry["buckets"].items():
            assert consistent_hash(entry["input"], int(buckets)) == expected, (entry["input"], buckets)


def test_consistent_hash_int_overflow_in_lcg_draw() -> None:
    # Pick the input whose first LCG state has all top 31 bits set: Guava's "(int) + 1" wraps negative there
    # and the walk stops at bucket 0, whatever the bucket count.
    multiplier_inverse = pow(2862933555777941757, -1, 1 << 64)
    raw = ((0xFFFFFFFE12345678 - 1) * multiplier_inverse) % (1 << 64)
    signed = raw - (1 << 64) if raw >> 63 else raw
    for buckets in (2, 3, 1024, 2**31 - 1):
        assert consistent_hash(signed, buckets) == 0


def test_epochs_and_transactions_share_the_segment_container() -> None:
    for number in (0, 1, 7, 42, 1000, 2**31 - 1):
        plain = f"scope/stream/{number}"
        names = [plain]
        for epoch in (0, 1, 5, 123456):
            qualified = f"{plain}.#epoch.{epoch}"
            names += [
                qualified,
                f"{qualified}#transaction.{epoch:016x}{number:016x}",
                f"{qualified}#transaction.{_TXN}",
                f"{qualified}#transient.{_TXN}.{epoch:032x}",
            ]
        for count in _COUNTS:
            expected = container_for_segment(plain, count)
            assert 0 <= expected < count
            assert {container_for_segment(name, count) for name in names} == {expected}, (plain, count)


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("scope/stream/3.#epoch.2", "scope/stream/3"),
        ("scope/stream/3.#epoch.0", "scope/stream/3"),
        ("scope/stream/3", "scope/stream/3"),
        (f"scope/stream/3.#epoch.2#transaction.{_TXN}", "scope/stream/3"),
        (f"scope/stream/3.#epoch.2#transient.{_TXN}.{_TXN}", "scope/stream/3"),
        # Without an epoch suffix only the id rules strip anything.
        (f"scope/stream/3#transaction.{_TXN}", "scope/stream/3"),
        (f"scope/stream/3#transient.{_TXN}.{_TXN}", "scope/stream/3"),
        ("scope/_tables", "scope/_tables"),
        ("scope/_tables/metadata.#.stream1", "scope/_tables/metadata.#.stream1"),
        ("scope/rg_kvtable/0", "scope/rg_kvtable/0"),
        ("scope/kvt_kvtable/3.#epoch.1", "scope/kvt_kvtable/3"),
        # Only the last epoch delimiter counts, and nothing checks what follows it.
        ("scope/stream/3.#epoch.2.#epoch.5", "scope/stream/3.#epoch.2"),
        ("scope/str.#epoch.eam/1", "scope/str"),
        # A transaction id shorter than 32 chars is no transaction; the epoch cut then swallows it.
        ("scope/stream/3.#epoch.2#transaction.0123", "scope/stream/3"),
        ("scope/stream/3#transaction.short", "scope/stream/3#transaction.short"),
        # Nested suffixes are stripped one after the other.
        (f"scope/stream/3.#epoch.2#transaction.{_TXN}#transaction.{_TXN}", "scope/stream/3"),
        # Java measures the id in UTF-16 units: one astral char plus 30 BMP chars is 32 units.
        ("scope/s/0#transaction.\U0001f600" + "0" * 30, "scope/s/0"),
        ("scope/s/0#transaction.\U0001f600" + "0" * 29, "scope/s/0#transaction.\U0001f600" + "0" * 29),
        ("", ""),
    ],
)
def test_documented_stripping_examples(name: str, base: str) -> None:
    assert segment_base_name(name) == base


def test_metadata_segments_go_to_their_numbered_container() -> None:
    assert container_for_segment("_system/containers/metadata_3", 16) == 3
    assert container_for_segment("_system/containers/storage_metadata_7", 16) == 7
    # The controller does not check the number against the container count.
    assert container_for_segment("_system/containers/metadata_99", 4) == 99
    # Unparseable or negative suffixes fall back to hashing, which always lands in range.
    for name in (
        "_system/containers/metadata_x",
        "_system/containers/metadata_-1",
        "_system/containers/metadata_",
    ):
        assert 0 <= container_for_segment(name, 4) < 4


def test_lone_surrogate_hashes_as_one_code_unit() -> None:
    assert java_string_hash("\ud800") == 0xD800
    assert murmur3_128_as_long("\ud83d\ude00", _SEED) == murmur3_128_as_long("\U0001f600", _SEED)


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        consistent_hash(1, 0)
    with pytest.raises(ValueError):
        consistent_hash(1, 2**31)
    with pytest.raises(ValueError):
        container_for_segment("scope/stream/0.#epoch.0", 0)
    with pytest.raises(ValueError):
        murmur3_128_as_long("x", 2**31)
