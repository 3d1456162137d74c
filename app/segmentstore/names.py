"""Names of the segments the controller asks a segment store about, as Pravega spells them.

Invariant: the same (parent, transaction id) always yields the name Pravega's NameUtils would.
"""

from __future__ import annotations

_U64 = 0xFFFFFFFFFFFFFFFF


def transaction_segment_name(segment_name: str, txn_high: int, txn_low: int) -> str:
    """`<parent>#transaction.<high><low>`: each half of the UUID as 16 lowercase hex digits of its
    64-bit two's complement (the halves arrive as Java longs, so they may be negative)."""
    return f"{segment_name}#transaction.{txn_high & _U64:016x}{txn_low & _U64:016x}"
