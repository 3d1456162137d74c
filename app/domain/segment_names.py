"""Pravega's segment-name grammar (NameUtils), owned here and nowhere else.

Segment names are wire facts: clients, segment stores and the container mapping all compute
them, so every function here builds or reads them bit for bit as Pravega 0.13's NameUtils does.

    scope/stream/<number>.#epoch.<epoch>                  a stream segment (epoch always present)
    scope/<kvt>_kvtable/<number>.#epoch.<epoch>           a key-value table's segment
    <parent>#transaction.<32 hex: txn id>                 a transaction's segment
    <parent>#transient.<32 hex: writer id>.<32 hex>       a large event's staging segment

Invariant: pure (standard library only, no I/O, no randomness), so the domain, the embedded
segment store and the PostgreSQL store can all import it; the wire codec needs no name and
stays alone.

Two readings of "is a transaction (transient) segment" exist: Pravega's `is_transaction_segment`
(`is_transient_segment`) needs the delimiter's last occurrence followed by at least the 32
characters of an id; `has_transaction_delimiter` (`has_transient_delimiter`) only looks for the
delimiter anywhere, the looser test our store has always applied when classifying a segment.
"""

from __future__ import annotations

import re
from typing import Final

TRANSACTION_DELIMITER: Final = "#transaction."
TRANSIENT_DELIMITER: Final = "#transient."
EPOCH_DELIMITER: Final = ".#epoch."
# NameUtils.KVTABLE_SUFFIX: a table's segments live under the pseudo-stream "<kvt>_kvtable",
# which can never clash with a user stream ("_" is not allowed inside user names).
KVTABLE_SUFFIX: Final = "_kvtable"

# A transaction id and a writer id are two 64-bit halves in 16 hex digits each. Java checks only
# that 32 chars (UTF-16 units) follow the delimiter, not that they are hex digits.
ID_LENGTH: Final = 32
_HALF_MASK: Final = 0xFFFFFFFFFFFFFFFF

_SEGMENT_PART: Final = re.compile(r"(\d+)\.#epoch\.(\d+)", re.ASCII)
_NUMBER_BOUND: Final = 2**32
_EPOCH_BOUND: Final = 2**31


# region building


def stream_segment_name(scope: str, stream: str, number: int, epoch: int) -> str:
    """NameUtils#getQualifiedStreamSegmentName: `scope/stream/<number>.#epoch.<epoch>`, the epoch
    suffix written even for epoch 0."""
    return f"{scope}/{stream}/{number}{EPOCH_DELIMITER}{epoch}"


def kvt_stream_name(kvt: str) -> str:
    """The pseudo-stream of a key-value table: its segments' middle name and its request key."""
    return f"{kvt}{KVTABLE_SUFFIX}"


def table_segment_name(scope: str, kvt: str, number: int, epoch: int) -> str:
    """NameUtils#getQualifiedTableSegmentName: `scope/<kvt>_kvtable/<number>.#epoch.<epoch>`."""
    return stream_segment_name(scope, kvt_stream_name(kvt), number, epoch)


def transaction_segment_name(parent: str, txn_high: int, txn_low: int) -> str:
    """NameUtils#getTransactionNameFromId: the transaction's segment under `parent` (named with the
    transaction's epoch), the two id halves in 16 lowercase hex digits each, two's complement."""
    return f"{parent}{TRANSACTION_DELIMITER}{txn_high & _HALF_MASK:016x}{txn_low & _HALF_MASK:016x}"


def transient_segment_name(parent: str, writer_id: int, random_hex: str) -> str:
    """NameUtils#getTransientNameFromId with the random part given (the caller draws it):
    `<parent>#transient.<writer id, 32 hex>.<random_hex>`; `writer_id` is the UUID's 128 bits,
    unsigned (the wire's U128)."""
    return f"{parent}{TRANSIENT_DELIMITER}{writer_id:032x}.{random_hex}"


# endregion

# region reading


def _utf16_length(text: str) -> int:
    # Java measures strings in UTF-16 units: an astral character counts twice.
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _delimiter_position(name: str, delimiter: str) -> int:
    """NameUtils#getDelimiterPosition: the delimiter's last occurrence when an id's 32 units
    follow it, else -1."""
    pos = name.rfind(delimiter)
    if pos < 0:
        return -1
    tail = name[pos + len(delimiter) :]
    if len(tail) < ID_LENGTH and _utf16_length(tail) < ID_LENGTH:
        return -1
    return pos


def has_transaction_delimiter(name: str) -> bool:
    """`#transaction.` anywhere in `name` (looser than is_transaction_segment: no id checked)."""
    return TRANSACTION_DELIMITER in name


def has_transient_delimiter(name: str) -> bool:
    """`#transient.` anywhere in `name` (looser than is_transient_segment: no id checked)."""
    return TRANSIENT_DELIMITER in name


def is_transaction_segment(name: str) -> bool:
    """NameUtils#isTransactionSegment."""
    return _delimiter_position(name, TRANSACTION_DELIMITER) >= 0


def is_transient_segment(name: str) -> bool:
    """NameUtils#isTransientSegment."""
    return _delimiter_position(name, TRANSIENT_DELIMITER) >= 0


def parent_segment_name(name: str) -> str | None:
    """NameUtils#getParentStreamSegmentName: the segment a transaction or transient segment
    merges into; None for any other name."""
    pos = _delimiter_position(name, TRANSACTION_DELIMITER)
    if pos < 0:
        pos = _delimiter_position(name, TRANSIENT_DELIMITER)
        if pos < 0:
            return None
    return name[:pos]


def primary_segment_name(name: str) -> str:
    """NameUtils#extractPrimaryStreamSegmentName, the string the container mapping hashes:
    transaction and transient suffixes stripped (recursively), then the epoch suffix.

    `scope/stream/3.#epoch.2#transaction.<32 hex>` -> `scope/stream/3`; names without the
    suffixes (`scope/_tables`) come back unchanged.
    """
    # Both delimiters start with "#t", which lets plain segment names skip the two searches.
    while "#t" in name:
        parent = parent_segment_name(name)
        if parent is None:
            break
        name = parent
    pos = name.rfind(EPOCH_DELIMITER)
    return name if pos < 0 else name[:pos]


def parse_stream_segment_name(name: str) -> tuple[str, str, int, int] | None:
    """`scope/stream/<number>.#epoch.<epoch>` -> (scope, stream, number, epoch), strictly: ASCII
    digits, a number below 2**32, an epoch below 2**31, non-empty scope and stream and no other
    `/`. None for any other name: a transaction's segment (any `#transaction.`), a table, a
    transient or a malformed name."""
    if has_transaction_delimiter(name):
        return None
    parts = name.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        return None
    match = _SEGMENT_PART.fullmatch(parts[2])
    if match is None:
        return None
    number, epoch = int(match[1]), int(match[2])
    if number >= _NUMBER_BOUND or epoch >= _EPOCH_BOUND:
        return None
    return parts[0], parts[1], number, epoch


# endregion
