"""Which segment container owns a segment: a bit-exact port of Pravega's SegmentToContainerMapper.

Invariant: for every name and container count we pick the same container the Java controller would.
"""

import struct
from functools import lru_cache
from typing import Final

from app.domain.segment_names import primary_segment_name

_MASK64: Final = (1 << 64) - 1
_MASK32: Final = (1 << 32) - 1
_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1

_C1: Final = 0x87C37B91114253D5
_C2: Final = 0x4CF5AD432745937F
_FMIX1: Final = 0xFF51AFD7ED558CCD
_FMIX2: Final = 0xC4CEB9FE1A85EC53

_LCG_MULTIPLIER: Final = 2862933555777941757
_TWO_POW_31: Final = 2147483648.0

_METADATA_PREFIX: Final = "_system/containers/metadata_"
_STORAGE_METADATA_PREFIX: Final = "_system/containers/storage_metadata_"

_HASH_CACHE_SIZE: Final = 65536


def _utf16_units(s: str) -> bytes:
    # Java strings are UTF-16; surrogatepass keeps a lone surrogate as the single code unit Java would hold.
    return s.encode("utf-16-le", "surrogatepass")


def _to_signed64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed 32-bit int."""
    data = _utf16_units(s)
    h = 0
    for unit in struct.unpack(f"<{len(data) // 2}H", data):
        h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h >> 31 else h


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * _FMIX1) & _MASK64
    k ^= k >> 33
    k = (k * _FMIX2) & _MASK64
    return k ^ (k >> 33)


def murmur3_128_as_long(s: str, seed: int) -> int:
    """Guava ``Hashing.murmur3_128(seed).hashUnencodedChars(s).asLong()``.

    Each UTF-16 code unit is fed as 2 little-endian bytes; the result is h1 as a signed 64-bit int.
    """
    return murmur3_128_bytes_as_long(_utf16_units(s), seed)


def murmur3_128_bytes_as_long(data: bytes, seed: int) -> int:
    """Guava ``Hashing.murmur3_128(seed).hashBytes(data).asLong()``: h1 as a signed 64-bit int."""
    if not _INT_MIN <= seed <= _INT_MAX:
        raise ValueError(f"seed must be a 32-bit int, got {seed}")
    length = len(data)
    # Guava stores the int seed into long fields, so a negative seed is sign-extended, not zero-extended.
    h1 = h2 = seed & _MASK64
    nblocks = length // 16
    words = struct.unpack_from(f"<{2 * nblocks}Q", data)
    for i in range(0, 2 * nblocks, 2):
        k1 = (_rotl64((words[i] * _C1) & _MASK64, 31) * _C2) & _MASK64
        h1 ^= k1
        h1 = (((_rotl64(h1, 27) + h2) & _MASK64) * 5 + 0x52DCE729) & _MASK64
        k2 = (_rotl64((words[i + 1] * _C2) & _MASK64, 33) * _C1) & _MASK64
        h2 ^= k2
        h2 = (((_rotl64(h2, 31) + h1) & _MASK64) * 5 + 0x38495AB5) & _MASK64
    tail = data[16 * nblocks :]
    if tail:
        k1, k2 = struct.unpack("<2Q", tail.ljust(16, b"\0"))
        h1 ^= (_rotl64((k1 * _C1) & _MASK64, 31) * _C2) & _MASK64
        h2 ^= (_rotl64((k2 * _C2) & _MASK64, 33) * _C1) & _MASK64
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & _MASK64
    h2 = (h2 + h1) & _MASK64
    h1 = (_fmix64(h1) + _fmix64(h2)) & _MASK64
    return _to_signed64(h1)


def consistent_hash(input_: int, buckets: int) -> int:
    """Guava ``Hashing.consistentHash(long, int)``; ``input_`` is taken modulo 2**64 like a Java long."""
    if not 0 < buckets <= _INT_MAX:
        raise ValueError(f"buckets must be a positive 32-bit int, got {buckets}")
    state = input_ & _MASK64
    candidate = 0
    while True:
        state = (state * _LCG_MULTIPLIER + 1) & _MASK64
        draw = (state >> 33) + 1
        # Guava adds 1 in int arithmetic: the top draw wraps to Integer.MIN_VALUE, making the double -1.0.
        if draw > _INT_MAX:
            draw = _INT_MIN
        step = (candidate + 1) / (draw / _TWO_POW_31)
        # Testing the double gives the same answer as Java's test on the saturating (int) cast of it.
        if step < 0 or step >= buckets:
            return candidate
        candidate = int(step)


def segment_base_name(qualified_name: str) -> str:
    """The string Pravega hashes (NameUtils#extractPrimaryStreamSegmentName): transaction and
    transient suffixes, then the epoch suffix, stripped; see segment_names.primary_segment_name."""
    return primary_segment_name(qualified_name)


def _is_java_decimal_digit(ch: str) -> bool:
    # Integer.parseInt reads chars, so astral digits arrive as two surrogates and are rejected.
    return ord(ch) <= 0xFFFF and ch.isdecimal()


def _java_parse_int(text: str) -> int | None:
    """Integer.parseInt(text) or None where Java would throw NumberFormatException."""
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits or not all(_is_java_decimal_digit(ch) for ch in digits):
        return None
    value = -int(digits) if text[0] == "-" else int(digits)
    return value if _INT_MIN <= value <= _INT_MAX else None


def _metadata_container_id(name: str) -> int | None:
    if not name.startswith((_METADATA_PREFIX, _STORAGE_METADATA_PREFIX)):
        return None
    parsed = _java_parse_int(name[name.rfind("_") + 1 :])
    return parsed if parsed is not None and parsed >= 0 else None


_SEED: Final = java_string_hash("SegmentToContainerMapper")


# Keyed by base name, so every epoch and transaction of a segment shares one entry; the count is
# fixed per cluster, so including it in the key costs nothing and keeps the cache always correct.
@lru_cache(maxsize=_HASH_CACHE_SIZE)
def _container_for_base_name(base_name: str, container_count: int) -> int:
    return consistent_hash(murmur3_128_as_long(base_name, _SEED), container_count)


def container_for_segment(qualified_name: str, container_count: int) -> int:
    """Container id for a segment, table segment or transaction segment, as the Java controller computes it.

    The controller builds its mapper with enableAdmin=true, so container and storage metadata segments
    (``_system/containers/metadata_<N>``) go to container N, unchecked against ``container_count``.
    """
    if not 0 < container_count <= _INT_MAX:
        raise ValueError(f"container_count must be a positive 32-bit int, got {container_count}")
    container = _metadata_container_id(qualified_name)
    if container is not None:
        return container
    return _container_for_base_name(segment_base_name(qualified_name), container_count)
