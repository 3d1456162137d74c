"""Segment ids and qualified segment names.

A segment id is `(creation_epoch << 32) | number` and keeps that value for the segment's
whole life; the qualified name always carries the epoch suffix, even for epoch 0.
"""

_LOW_32 = 0xFFFFFFFF


def segment_id(number: int, creation_epoch: int) -> int:
    return (creation_epoch << 32) | (number & _LOW_32)


def epoch_of(segment: int) -> int:
    return segment >> 32


def number_of(segment: int) -> int:
    return segment & _LOW_32


def qualified_segment_name(scope: str, stream: str, segment: int) -> str:
    return f"{scope}/{stream}/{number_of(segment)}.#epoch.{epoch_of(segment)}"


def qualified_stream_name(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"


def transaction_segment_name(segment_name: str, txn_high: int, txn_low: int) -> str:
    """Pravega's name of a transaction's segment under `segment_name` (its parent, named with the
    transaction's epoch): the two id halves in 16 lowercase hex digits each, two's complement."""
    return (
        f"{segment_name}#transaction.{txn_high & 0xFFFFFFFFFFFFFFFF:016x}{txn_low & 0xFFFFFFFFFFFFFFFF:016x}"
    )
