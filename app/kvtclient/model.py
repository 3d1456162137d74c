"""The values a key-value table client hands out and takes: keys (primary + secondary), versions,
entries, pages of an iteration.

Invariant: a key's serialization is its primary key followed by its secondary key, both of the
table's fixed lengths (Pravega's TableEntryHelper), so serialized keys of one table all have the
same length and sort as Pravega's TableKeyComparator sorts keys (unsigned bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.kvtclient.errors import InvalidKey
from app.segmentstore.wire import commands as wc

# VersionImpl.NO_SEGMENT_ID: the version names no segment (NOT_EXISTS, NO_VERSION).
NO_SEGMENT_ID: Final = -(1 << 63)
# TableKey.NO_VERSION and TableKey.NOT_EXISTS of the wire protocol.
WIRE_NO_VERSION: Final = wc.TABLE_KEY_NO_VERSION
WIRE_NOT_EXISTS: Final = wc.TABLE_KEY_NOT_EXISTS
# TableSegment.MAXIMUM_VALUE_LENGTH (= the segment store's limit): 1 MiB less the longest key.
MAX_VALUE_BYTES: Final = 1024 * 1024 - 8192
# TableSegment.MAXIMUM_BATCH_KEY_COUNT: the most keys one update, removal or read may carry.
MAX_BATCH_KEYS: Final = 256


@dataclass(frozen=True, slots=True)
class TableKey:
    """A key: the primary key picks the table segment; keys sharing it can change atomically."""

    primary: bytes
    secondary: bytes = b""


@dataclass(frozen=True, slots=True)
class Version:
    """A key's version: the table segment holding it and the key's version in that segment
    (Pravega's VersionImpl; `str()` gives its "segment:version" form)."""

    segment_id: int
    segment_version: int

    def __str__(self) -> str:
        return f"{self.segment_id}:{self.segment_version}"

    @classmethod
    def parse(cls, text: str) -> Version:
        """The inverse of `str()` (VersionImpl.fromString)."""
        parts = text.split(":")
        if len(parts) != 2:
            raise ValueError(f"not a key version: {text!r} (expected '<segment id>:<version>')")
        try:
            return cls(int(parts[0]), int(parts[1]))
        except ValueError:
            raise ValueError(f"not a key version: {text!r} (expected two integers)") from None


# Version.NOT_EXISTS: the condition "the key must not exist" (an insert).
NOT_EXISTS: Final = Version(NO_SEGMENT_ID, WIRE_NOT_EXISTS)
# Version.NO_VERSION: no condition.
NO_VERSION: Final = Version(NO_SEGMENT_ID, WIRE_NO_VERSION)


@dataclass(frozen=True, slots=True)
class TableEntry:
    key: TableKey
    value: bytes
    version: Version


@dataclass(frozen=True, slots=True)
class KeyPage:
    """One page of a key iteration; `continuation` resumes the iteration after this page."""

    keys: list[TableKey]
    versions: list[Version]
    continuation: bytes


@dataclass(frozen=True, slots=True)
class EntryPage:
    """One page of an entry iteration; `continuation` resumes the iteration after this page."""

    entries: list[TableEntry]
    continuation: bytes


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The table's key lengths, from its configuration."""

    primary_length: int
    secondary_length: int

    @property
    def length(self) -> int:
        return self.primary_length + self.secondary_length

    def check_primary(self, primary: bytes) -> None:
        if len(primary) != self.primary_length:
            raise InvalidKey(
                f"a primary key of this table has {self.primary_length} bytes, not {len(primary)}"
            )

    def serialize(self, key: TableKey) -> bytes:
        self.check_primary(key.primary)
        if len(key.secondary) != self.secondary_length:
            if self.secondary_length == 0:
                raise InvalidKey("this table has no secondary keys")
            raise InvalidKey(
                f"a secondary key of this table has {self.secondary_length} bytes, not {len(key.secondary)}"
            )
        return key.primary + key.secondary

    def deserialize(self, data: bytes) -> TableKey:
        if len(data) != self.length:
            raise InvalidKey(f"the segment store returned a key of {len(data)} bytes, not {self.length}")
        return TableKey(data[: self.primary_length], data[self.primary_length :])


def check_value(value: bytes) -> None:
    if len(value) > MAX_VALUE_BYTES:
        raise InvalidKey(f"a value has at most {MAX_VALUE_BYTES} bytes, not {len(value)}")


@dataclass(frozen=True, slots=True)
class Put:
    """Sets a key's value: unconditionally (version None), or only while the key has `version`."""

    key: TableKey
    value: bytes
    version: Version | None = None


@dataclass(frozen=True, slots=True)
class Insert:
    """Sets a key's value only if the key does not exist."""

    key: TableKey
    value: bytes


@dataclass(frozen=True, slots=True)
class Remove:
    """Removes a key: unconditionally (version None; an absent key is no error), or only while
    the key has `version`."""

    key: TableKey
    version: Version | None = None


Change = Put | Insert | Remove


def successor(key: bytes) -> bytes | None:
    """The next key of the same length in unsigned byte order, None after the last one
    (SegmentIteratorArgs.next): where an iteration resumes after `key`."""
    data = bytearray(key)
    for i in range(len(data) - 1, -1, -1):
        if data[i] != 0xFF:
            data[i] += 1
            return bytes(data)
        data[i] = 0
    return None
