"""One connection's writers: SetupAppend, the append commands, and the rules Pravega's append
decoder enforces on them.

Invariant: an append reaches storage only for a writer set up on this connection, with a positive
event count and an event number that never goes backwards for that writer on this connection;
anything else is a protocol violation (`ProtocolViolation`) and the connection closes. A
DataAppended is built only from the storage call's result, so it acknowledges committed bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.metrics.record import StoreTraffic
from app.segmentstore import storage as st
from app.segmentstore.server.arriving import Arrival, ArrivingAppends
from app.segmentstore.server.tails import Tails
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import MalformedCommand, append_data, encode


class ProtocolViolation(Exception):
    """The peer broke the append protocol: the connection must close."""


@dataclass(slots=True)
class _Writer:
    segment: str
    # The highest last_event_number this connection sent for the writer (the decoder's check,
    # independent of what storage holds).
    last_event_number: int


class Appends:
    def __init__(
        self,
        storage: st.SegmentStorage,
        tails: Tails,
        traffic: StoreTraffic | None = None,
        arriving: ArrivingAppends | None = None,
    ) -> None:
        """`arriving`: the port's appends on their way to storage (a setup waits for its writer's)."""
        self._storage = storage
        self._arriving = arriving if arriving is not None else ArrivingAppends()
        self._traffic = traffic
        self._tails = tails
        self._writers: dict[int, _Writer] = {}
        self._open_block: wc.AppendBlock | None = None

    async def setup_append(self, cmd: wc.SetupAppend) -> wc.Command:
        # Answers AppendSetup on a sealed segment too (the writer learns of the seal from its
        # first append), NoSuchSegment (offset -1) when the segment is missing.
        # Blocks of the writer another connection received are stored first, or dropped: the
        # number told covers every block it ever sent here (app/segmentstore/server/arriving.py).
        await self._arriving.handed_over(cmd.segment, cmd.writer_id)
        last = await self._storage.writer_event_number(cmd.segment, cmd.writer_id)
        self._writers[cmd.writer_id] = _Writer(cmd.segment, st.NULL_ATTRIBUTE_VALUE)
        return wc.AppendSetup(cmd.request_id, cmd.segment, cmd.writer_id, last)

    def append_block(self, cmd: wc.AppendBlock) -> None:
        if self._open_block is not None:
            raise ProtocolViolation("AppendBlock inside an open AppendBlock")
        self._writer(cmd.writer_id)
        self._open_block = cmd

    def expect_block_end(self, cmd: wc.Command) -> None:
        """After an AppendBlock, the only frame allowed is its writer's AppendBlockEnd."""
        block = self._open_block
        if block is None:
            return
        if not isinstance(cmd, wc.AppendBlockEnd) or cmd.writer_id != block.writer_id:
            raise ProtocolViolation(f"{type(cmd).__name__} after an AppendBlock")

    def abandon_block(self) -> None:
        """The open AppendBlock's end was refused before it was stored (WrongHost)."""
        self._open_block = None

    def segment_of(self, writer_id: int) -> str | None:
        writer = self._writers.get(writer_id)
        return None if writer is None else writer.segment

    async def append_block_end(self, cmd: wc.AppendBlockEnd) -> wc.Command:
        return await self.store(self.request_of(cmd), cmd.request_id)

    async def conditional_block_end(self, cmd: wc.ConditionalBlockEnd) -> wc.Command:
        return await self.store(self.request_of(cmd), cmd.request_id)

    async def conditional_append(self, cmd: wc.ConditionalAppend) -> wc.Command:
        return await self.store(self.request_of(cmd), cmd.request_id)

    def request_of(
        self, cmd: wc.AppendBlockEnd | wc.ConditionalBlockEnd | wc.ConditionalAppend
    ) -> st.AppendRequest:
        """What an append command asks storage to do, after the decoder's checks (no await: the
        connection hands appends to storage in the order they arrived)."""
        if isinstance(cmd, wc.AppendBlockEnd):
            return self._block_end_request(cmd)
        segment = self._writer(cmd.writer_id).segment
        # A conditional append stores the framed event, its 8-byte header included.
        data = cmd.data if isinstance(cmd, wc.ConditionalBlockEnd) else encode(cmd.event)
        return st.AppendRequest(segment, cmd.writer_id, data, cmd.event_number, 1, cmd.expected_offset)

    def _block_end_request(self, cmd: wc.AppendBlockEnd) -> st.AppendRequest:
        block, self._open_block = self._open_block, None
        writer = self._writer(cmd.writer_id)
        if cmd.num_event <= 0:
            raise ProtocolViolation(f"num_event {cmd.num_event}")
        if cmd.last_event_number < writer.last_event_number:
            raise ProtocolViolation(f"event number {cmd.last_event_number} after {writer.last_event_number}")
        try:
            data = append_data(block, cmd)
        except MalformedCommand as exc:
            raise ProtocolViolation(str(exc)) from exc
        writer.last_event_number = cmd.last_event_number
        return st.AppendRequest(writer.segment, cmd.writer_id, data, cmd.last_event_number, cmd.num_event)

    def drop(self, writer_id: int) -> None:
        """Forgets a writer whose segment was sealed or is gone: it must set up again."""
        self._writers.pop(writer_id, None)

    def _writer(self, writer_id: int) -> _Writer:
        writer = self._writers.get(writer_id)
        if writer is None:
            raise ProtocolViolation(f"writer {writer_id:032x} appends before SetupAppend")
        return writer

    async def store(
        self, request: st.AppendRequest, request_id: int, arrival: Arrival | None = None
    ) -> wc.Command:
        """Stores `request` and builds its acknowledgement from what was committed. Reaches
        storage's group commit before its first suspension, so appends started in order are
        committed in order (and `arrival` is handed over in that same step)."""
        ticket = self._tails.append_started(request.segment)
        if arrival is not None:
            arrival.handed_over()
        try:
            result = await self._storage.append(request)
        except BaseException as exc:
            self._tails.append_failed(request.segment)
            if isinstance(exc, st.SegmentSealed | st.NoSuchSegment):
                self.drop(request.writer_id)
            raise
        self._tails.append_ended(
            request.segment, ticket, result.length, None if result.duplicate else request.data
        )
        if not result.duplicate and self._traffic is not None:
            self._traffic.appended(request.num_events, len(request.data))
        return wc.DataAppended(
            request.writer_id, result.event_number, result.previous_event_number, request_id, result.length
        )
