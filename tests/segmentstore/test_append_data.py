"""Reassembling one append from Java's AppendBlock + PartialEvent/Padding + AppendBlockEnd, or from
a lone AppendBlockEnd (the Rust client), and refusing blocks that break the protocol."""

from __future__ import annotations

import pytest

from app.segmentstore.wire import commands as c
from app.segmentstore.wire.codec import MalformedCommand, append_data, decode, encode

WRITER = 77
EVENTS = [encode(c.Event(f"event-{i}".encode())) for i in range(3)]


def received_block(events: bytes, closing: c.Command | None) -> c.AppendBlock:
    """An AppendBlock as the server decodes it off the wire: whole events, then one nested frame."""
    sent = c.AppendBlock(WRITER, events + (encode(closing) if closing else b""))
    frame = encode(sent)
    block = decode(c.AppendBlock.TYPE, frame[8:])
    assert isinstance(block, c.AppendBlock)
    return block


def block_end(
    data: bytes, size_of_whole_events: int, *, writer: int = WRITER, events: int = 3
) -> c.AppendBlockEnd:
    return c.AppendBlockEnd(writer, size_of_whole_events, data, events, 3, 1)


def test_a_lone_block_end_is_the_whole_append() -> None:
    data = b"".join(EVENTS)
    assert append_data(None, block_end(data, len(data))) == data


def test_whole_events_then_a_partial_event_finished_by_the_block_end() -> None:
    whole = EVENTS[0] + EVENTS[1]
    split = 5
    block = received_block(whole, c.PartialEvent(EVENTS[2][:split]))
    assert append_data(block, block_end(EVENTS[2][split:], len(whole))) == b"".join(EVENTS)


def test_a_partial_event_only() -> None:
    block = received_block(b"", c.PartialEvent(EVENTS[0][:3]))
    assert append_data(block, block_end(EVENTS[0][3:], 0, events=1)) == EVENTS[0]


def test_whole_events_then_padding() -> None:
    whole = EVENTS[0] + EVENTS[1]
    block = received_block(whole, c.Padding(11))
    assert append_data(block, block_end(b"", len(whole), events=2)) == whole


def test_a_block_of_whole_events_only() -> None:
    whole = b"".join(EVENTS)
    assert append_data(received_block(whole, None), block_end(b"", len(whole))) == whole


@pytest.mark.parametrize(
    ("block", "end"),
    [
        # Padding says the block holds no partial event, so data after it has no place.
        (received_block(EVENTS[0], c.Padding(4)), block_end(b"x", len(EVENTS[0]), events=1)),
        (received_block(EVENTS[0], None), block_end(b"x", len(EVENTS[0]), events=1)),
        (None, block_end(EVENTS[0], len(EVENTS[0]), events=0)),
        (received_block(EVENTS[0], c.Padding(4)), block_end(b"", len(EVENTS[0]), writer=WRITER + 1)),
        (received_block(EVENTS[0], c.Padding(4)), block_end(b"", len(EVENTS[0]) + 13)),
        (received_block(EVENTS[0], c.Padding(4)), block_end(b"", -1)),
        # The rest of the block must be a PartialEvent or Padding frame, and fill it exactly.
        (received_block(EVENTS[0], c.KeepAlive()), block_end(b"", len(EVENTS[0]))),
        (received_block(EVENTS[0], c.Event(b"e")), block_end(b"", len(EVENTS[0]))),
        (c.AppendBlock(WRITER, EVENTS[0] + encode(c.Padding(4))[:-1]), block_end(b"", len(EVENTS[0]))),
        (c.AppendBlock(WRITER, EVENTS[0] + encode(c.Padding(4)) + b"\0"), block_end(b"", len(EVENTS[0]))),
        (c.AppendBlock(WRITER, EVENTS[0] + b"\xff\xff\xff"), block_end(b"", len(EVENTS[0]))),
    ],
    ids=[
        "padding-then-data",
        "no-partial-then-data",
        "no-events",
        "other-writer",
        "whole-events-past-block",
        "negative-whole-events",
        "keepalive-closes-block",
        "event-closes-block",
        "short-closing-frame",
        "bytes-after-closing-frame",
        "truncated-closing-header",
    ],
)
def test_protocol_violations_are_malformed(block: c.AppendBlock | None, end: c.AppendBlockEnd) -> None:
    with pytest.raises(MalformedCommand):
        append_data(block, end)
