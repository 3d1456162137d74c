"""Segment ids and qualified segment names.

A segment id is `(creation_epoch << 32) | number` and keeps that value for the segment's
whole life; the qualified name always carries the epoch suffix, even for epoch 0 (the name's
grammar is segment_names.py's).
"""

from app.domain.segment_names import stream_segment_name
from app.domain.segment_names import transaction_segment_name as transaction_segment_name

_LOW_32 = 0xFFFFFFFF


def segment_id(number: int, creation_epoch: int) -> int:
    return (creation_epoch << 32) | (number & _LOW_32)


def epoch_of(segment: int) -> int:
    return segment >> 32


def number_of(segment: int) -> int:
    return segment & _LOW_32


def qualified_segment_name(scope: str, stream: str, segment: int) -> str:
    return stream_segment_name(scope, stream, number_of(segment), epoch_of(segment))


def qualified_stream_name(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"
