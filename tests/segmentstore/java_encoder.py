"""The bytes a Java client's connection writes: a model of Pravega's Java CommandEncoder (its
append blocks, nested PartialEvent and Padding frames, per-writer sessions that queue appends while
another writer owns the channel), so that the server's tests can send exactly what a Java client
sends, frame for frame.

Only the encoder's framing is modelled; the block size is the test's choice (Java's comes from its
AppendBatchSizeTracker) and a block timeout happens when the test calls `timeout()`.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode

HEADER = struct.Struct(">ii")
# Java's Session.MAX_EVENTS and MAX_DATA_SIZE: a queued session flushes beyond either.
MAX_EVENTS = 500
MAX_DATA_SIZE = 1024 * 1024


def append_block_header(writer_id: int, block_size: int) -> bytes:
    """An AppendBlock frame's header and writer id; `block_size` bytes of block follow."""
    return HEADER.pack(wc.AppendBlock.TYPE, 16 + block_size) + writer_id.to_bytes(16, "big")


@dataclass
class _Session:
    writer_id: int
    request_id: int  # the SetupAppend's: every AppendBlockEnd of the session carries it
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    last_event_number: int = -1
    event_count: int = 0


@dataclass
class JavaEncoder:
    block_size: int
    out: bytearray = field(default_factory=bytearray)
    block_ends: list[wc.AppendBlockEnd] = field(default_factory=list)
    _sessions: dict[tuple[str, int], _Session] = field(default_factory=dict)
    _queued: dict[int, _Session] = field(default_factory=dict)
    _owner: tuple[str, int] | None = None
    _current_block: int = 0
    _left: int = 0

    def setup_append(self, request_id: int, writer_id: int, segment: str) -> None:
        self.command(wc.SetupAppend(request_id, writer_id, segment, ""))
        self._sessions[(segment, writer_id)] = _Session(writer_id, request_id)

    def command(self, cmd: wc.Command) -> None:
        """Any other command: the open block and the queued sessions go out first."""
        self._break_current()
        self._flush_all()
        self.out += encode(cmd)

    def timeout(self) -> None:
        """The block timer fired: close the open block, send what is queued."""
        self._break_current()
        self._flush_all()

    def append(self, segment: str, writer_id: int, event_number: int, event: bytes) -> None:
        """One framed event (type 0, length, payload) of a set-up writer."""
        session = self._sessions[(segment, writer_id)]
        assert event_number > session.last_event_number
        session.last_event_number = event_number
        session.event_count += 1
        if self._owner is None:
            if session.event_count == 1:
                self._start(segment, writer_id, len(event))
                self._continue(event)
                if self._left == 0:
                    self._complete(b"")
            else:
                self._queue(session, event)
                self._flush(session)
        elif self._owner == (segment, writer_id):
            if self._left > len(event):
                self._continue(event)
            else:
                inside, rest = event[: self._left], event[self._left :]
                self.out += encode(wc.PartialEvent(inside))
                self._complete(rest)
                self._flush_all()
        else:
            self._queue(session, event)

    def _start(self, segment: str, writer_id: int, size: int) -> None:
        self._owner = (segment, writer_id)
        if self.block_size > size:
            # Room for the block's events plus the header of the frame that will close it.
            self._current_block = self.block_size
            self.out += append_block_header(writer_id, self.block_size + HEADER.size)
        else:
            self._current_block = size
            self.out += append_block_header(writer_id, size)
        self._left = self._current_block

    def _continue(self, data: bytes) -> None:
        self._left -= len(data)
        self.out += data

    def _complete(self, rest: bytes) -> None:
        assert self._owner is not None
        session = self._sessions[self._owner]
        self._end(session, self._current_block - self._left, rest)
        self._owner, self._current_block, self._left = None, 0, 0

    def _break_current(self) -> None:
        if self._owner is None:
            return
        self.out += HEADER.pack(wc.Padding.TYPE, self._left) + bytes(self._left)
        self._complete(b"")

    def _queue(self, session: _Session, event: bytes) -> None:
        self._queued.setdefault(session.writer_id, session)
        session.pending.append(event)
        session.pending_bytes += len(event)
        if session.pending_bytes > MAX_DATA_SIZE or session.event_count > MAX_EVENTS:
            self._break_current()
            self._flush(session)

    def _flush(self, session: _Session) -> None:
        if session.event_count == 0:
            return
        self._queued.pop(session.writer_id, None)
        self.out += append_block_header(session.writer_id, session.pending_bytes)
        self.out += b"".join(session.pending)
        self._end(session, session.pending_bytes, b"")
        session.pending.clear()
        session.pending_bytes = 0

    def _flush_all(self) -> None:
        for session in list(self._queued.values()):
            self._flush(session)

    def _end(self, session: _Session, whole: int, rest: bytes) -> None:
        end = wc.AppendBlockEnd(
            session.writer_id, whole, rest, session.event_count, session.last_event_number, session.request_id
        )
        self.block_ends.append(end)
        self.out += encode(end)
        session.event_count = 0


def new_writer_id() -> int:
    return uuid.uuid4().int
