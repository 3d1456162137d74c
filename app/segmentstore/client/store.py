"""The SegmentStore port over Pravega's wire protocol: what Pravega's SegmentHelper does for the
controller, to whichever segment store owns each segment's container.

Invariant: every call is idempotent on its outcome, as the port demands: the replies Pravega's
controller treats as "done already" (SegmentAlreadyExists to a create, SegmentIsSealed to a seal,
NoSuchSegment to a delete) count as success, so a workflow step can always run again.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

from app.domain.errors import InvalidInput, NotFound, StoreUnavailable
from app.domain.hosts import HostAddress
from app.domain.ids import transaction_segment_name
from app.domain.records import ScaleType
from app.ports import SegmentInfo, SegmentStoreLocator
from app.segmentstore.client.connections import ConnectionPool, next_request_id
from app.segmentstore.client.replies import WrongHostReply, expect
from app.segmentstore.wire import commands as wc

T = TypeVar("T")
C = TypeVar("C", bound=wc.Command)

# Every event in a segment is framed as [i32 type 0][i32 payload length][payload].
EVENT_HEADER_BYTES: Final = 8
_EVENT_HEADER: Final = struct.Struct(">ii")
# A WrongHost answer means our container map is behind the cluster's: the locator's snapshot
# catches up within a poll, so ask it again a few times, backing off, before giving up.
_WRONG_HOST_ATTEMPTS: Final = 4
_WRONG_HOST_BACKOFF_S: Final = 0.05
# Segments of one batch (a stream's first epoch, a transaction's segments) in flight at once.
_BATCH_CONCURRENCY: Final = 4
# CreateSegments pipelined on one connection (one send each way; a store runs them together).
_PIPELINED_CREATES: Final = 64
# One ReadSegment of a bounded read asks for at most this much (Pravega's readers ask 1 MiB).
_READ_CHUNK_BYTES: Final = 1024 * 1024


def _wire_policy(scale_type: ScaleType, target_rate: int) -> tuple[int, int]:
    """(scale type byte, target rate) as Pravega's controller sends them: a fixed policy has no rate."""
    if scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return 0, 0
    return int(scale_type), target_rate


class WireSegmentStore:
    """`SegmentStore` over TCP, plus `append` (simulated writer traffic) and `close`."""

    def __init__(
        self,
        locator: SegmentStoreLocator,
        *,
        request_timeout_s: float = 30.0,
        token: Callable[[], str] = lambda: "",
        max_connections_per_host: int = 8,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._locator = locator
        self._token = token
        self._pool = ConnectionPool(
            timeout_s=request_timeout_s, max_per_endpoint=max_connections_per_host, tls=tls
        )

    @property
    def pool(self) -> ConnectionPool:
        """The pooled connections: tests send commands outside the port through it."""
        return self._pool

    async def close(self) -> None:
        await self._pool.close()

    # --- stream segments -----------------------------------------------------------------------

    async def create_segment(
        self, name: str, scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        wire_type, rate = _wire_policy(scale_type, target_rate)
        await self._create(name, wire_type, rate, rollover_size_bytes)

    async def create_segments(
        self, names: Sequence[str], scale_type: ScaleType, target_rate: int, rollover_size_bytes: int
    ) -> None:
        wire_type, rate = _wire_policy(scale_type, target_rate)
        # Not pipelined: a stream's first epoch is created once, off the hot path, and a failure
        # here stops the creates not started yet.
        await _for_each(names, lambda name: self._create(name, wire_type, rate, rollover_size_bytes))

    async def seal_segment(self, name: str) -> int:
        await self._call(
            name,
            lambda rid: wc.SealSegment(rid, name, self._token()),
            (wc.SegmentSealed, wc.SegmentIsSealed),
        )
        return (await self.get_segment_info(name)).length

    async def truncate_segment(self, name: str, offset: int) -> None:
        reply = await self._call(
            name,
            lambda rid: wc.TruncateSegment(rid, name, offset, self._token()),
            (wc.SegmentTruncated, wc.SegmentIsTruncated),
        )
        if isinstance(reply, wc.SegmentIsTruncated):
            # Pravega's controller takes this as "truncated there already" (the offset is below
            # the start), but the server sends it as well for an offset past the end, which no
            # retry can fix: tell the two apart by the length.
            info = await self.get_segment_info(name)
            if offset > info.length:
                raise InvalidInput(f"cannot truncate {name} at {offset}: its length is {info.length}")

    async def delete_segment(self, name: str) -> None:
        await self._call(
            name,
            lambda rid: wc.DeleteSegment(rid, name, self._token()),
            (wc.SegmentDeleted, wc.NoSuchSegment),
        )

    async def update_policy(self, name: str, scale_type: ScaleType, target_rate: int) -> None:
        wire_type, rate = _wire_policy(scale_type, target_rate)
        await self._call(
            name,
            lambda rid: wc.UpdateSegmentPolicy(rid, name, rate, wire_type, self._token()),
            wc.SegmentPolicyUpdated,
        )

    async def get_segment_info(self, name: str) -> SegmentInfo:
        info = await self._call(
            name,
            lambda rid: wc.GetStreamSegmentInfo(rid, name, self._token()),
            wc.StreamSegmentInfo,
        )
        if not info.exists or info.is_deleted:
            raise NotFound(f"segment {name} does not exist")
        return SegmentInfo(name, info.write_offset, info.start_offset, info.is_sealed)

    # --- transaction segments ------------------------------------------------------------------

    async def create_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        # No parent check, as in Pravega: a transaction is named after its generalised parent
        # seg(number, txn epoch), which need not exist as a segment.
        await self._create(
            transaction_segment_name(segment_name, txn_high, txn_low), 0, 0, rollover_size_bytes
        )

    async def create_transaction_segments(
        self, segment_names: Sequence[str], txn_high: int, txn_low: int, rollover_size_bytes: int
    ) -> None:
        names = [transaction_segment_name(parent, txn_high, txn_low) for parent in segment_names]
        await self._create_many(names, 0, 0, rollover_size_bytes)

    async def merge_transaction_segment(
        self, segment_name: str, txn_high: int, txn_low: int, *, txn_parent: str | None = None
    ) -> int:
        return await self.merge_transaction_segments(
            segment_name, [(txn_high, txn_low)], txn_parent=txn_parent
        )

    async def merge_transaction_segments(
        self, segment_name: str, txns: Sequence[tuple[int, int]], *, txn_parent: str | None = None
    ) -> int:
        parent = txn_parent or segment_name
        sources = tuple(transaction_segment_name(parent, high, low) for high, low in txns)
        if not sources:
            return (await self.get_segment_info(segment_name)).length
        reply = await self._call(
            segment_name,
            lambda rid: wc.MergeSegmentsBatch(rid, segment_name, sources, self._token()),
            wc.SegmentsBatchMerged,
        )
        offsets = reply.new_target_write_offsets
        if offsets and offsets[-1] >= 0:
            return offsets[-1]
        # A server that reports no offset (Java's -1 for a source merged already): ask.
        return (await self.get_segment_info(segment_name)).length

    async def abort_transaction_segment(self, segment_name: str, txn_high: int, txn_low: int) -> None:
        await self.delete_segment(transaction_segment_name(segment_name, txn_high, txn_low))

    # --- table segments ------------------------------------------------------------------------

    async def create_table_segment(self, name: str, key_length: int, rollover_size_bytes: int) -> None:
        await self._call(
            name,
            lambda rid: wc.CreateTableSegment(
                rid,
                name,
                self._token(),
                sorted=False,
                key_length=key_length,
                rollover_size_bytes=rollover_size_bytes,
            ),
            (wc.SegmentCreated, wc.SegmentAlreadyExists),
        )

    async def delete_table_segment(self, name: str, must_be_empty: bool) -> None:
        await self._call(
            name,
            lambda rid: wc.DeleteTableSegment(rid, name, must_be_empty, self._token()),
            (wc.SegmentDeleted, wc.NoSuchSegment),
        )

    # --- simulated writer traffic --------------------------------------------------------------

    async def append(self, name: str, size: int) -> int:
        """Appends one event as a new writer would (SetupAppend, then one AppendBlockEnd) and
        returns the segment's new length. `size` is what the segment grows by: the event's
        8-byte header included (an event of `size - 8` zero bytes). Below 8 bytes no event fits:
        the bytes go in raw, as a byte-stream writer's do (tests of lengths and offsets use them).
        IllegalState when the segment is sealed, NotFound when it does not exist."""
        if size <= 0:
            raise ValueError(f"an append grows a segment by at least one byte, not {size}")
        if size < EVENT_HEADER_BYTES:
            data = bytes(size)
        else:
            data = _EVENT_HEADER.pack(0, size - EVENT_HEADER_BYTES) + bytes(size - EVENT_HEADER_BYTES)
        writer_id = secrets.randbits(128)

        async def attempt(endpoint: HostAddress) -> int:
            async with self._pool.dedicated(endpoint) as connection:
                setup = wc.SetupAppend(next_request_id(), writer_id, name, self._token())
                appended = expect(
                    setup, await connection.request(setup, self._pool.timeout_s), wc.AppendSetup
                )
                # A new writer's last event number is NULL_ATTRIBUTE_VALUE: its first event is 1.
                last = appended.last_event_number
                event_number = 1 if last == wc.NULL_ATTRIBUTE_VALUE else last + 1
                block = wc.AppendBlockEnd(
                    writer_id,
                    size_of_whole_events=len(data),
                    data=data,
                    num_event=1,
                    last_event_number=event_number,
                    request_id=next_request_id(),
                )
                done = expect(block, await connection.request(block, self._pool.timeout_s), wc.DataAppended)
            if done.current_segment_write_offset >= 0:
                return done.current_segment_write_offset
            return (await self.get_segment_info(name)).length

        return await self._on_owner(name, attempt)

    # --- revisioned segments (`_MARK<stream>`): conditional appends and bounded reads ---------

    async def conditional_append(self, name: str, payload: bytes, expected_offset: int) -> int | None:
        """Appends `payload` as one Event only if the segment's length is `expected_offset`, as
        Pravega's ConditionalOutputStream does (a new writer's SetupAppend, then ConditionalAppend
        with event number 1). Returns the segment's new length, or None when its length was not
        `expected_offset` (ConditionalCheckFailed: someone appended first, maybe this very event
        before a lost reply). IllegalState when sealed, NotFound when missing."""
        if expected_offset < 0:
            raise ValueError(f"an expected offset is never negative, not {expected_offset}")
        writer_id = secrets.randbits(128)

        async def attempt(endpoint: HostAddress) -> int | None:
            async with self._pool.dedicated(endpoint) as connection:
                setup = wc.SetupAppend(next_request_id(), writer_id, name, self._token())
                expect(setup, await connection.request(setup, self._pool.timeout_s), wc.AppendSetup)
                append = wc.ConditionalAppend(
                    writer_id, 1, expected_offset, wc.Event(payload), next_request_id()
                )
                reply = await connection.request(append, self._pool.timeout_s)
            if isinstance(reply, wc.ConditionalCheckFailed):
                return None
            done = expect(append, reply, wc.DataAppended)
            if done.current_segment_write_offset >= 0:
                return done.current_segment_write_offset
            return expected_offset + EVENT_HEADER_BYTES + len(payload)

        return await self._on_owner(name, attempt)

    async def read_range(self, name: str, start: int, end: int) -> bytes:
        """The segment's bytes [start, end), `end` at most its length (a read at the tail of an
        open segment would wait for an append). InvalidInput when `start` is truncated away."""
        if not 0 <= start <= end:
            raise ValueError(f"cannot read [{start}, {end})")
        out = bytearray()
        while start + len(out) < end:
            offset = start + len(out)
            wanted = min(end - offset, _READ_CHUNK_BYTES)
            read = await self._call(name, _read_command(name, offset, wanted, self._token), wc.SegmentRead)
            if not read.data:
                raise StoreUnavailable(f"segment {name}: an empty read at {offset}, below its end {end}")
            out += read.data[: end - offset]
        return bytes(out)

    # --- plumbing ------------------------------------------------------------------------------

    async def _create(self, name: str, scale_type: int, target_rate: int, rollover_size_bytes: int) -> None:
        await self._call(
            name,
            lambda rid: wc.CreateSegment(
                rid, name, target_rate, scale_type, self._token(), rollover_size_bytes
            ),
            (wc.SegmentCreated, wc.SegmentAlreadyExists),
        )

    async def _create_many(
        self, names: Sequence[str], scale_type: int, target_rate: int, rollover_size_bytes: int
    ) -> None:
        """Creates `names`, pipelined per owning store in chunks of _PIPELINED_CREATES (Pravega's
        wire protocol has no batch create: these are plain CreateSegments, answered one by one).
        A name whose store answers WrongHost is created alone, asking the locator again; the
        first other failure is raised once every chunk ended."""

        def alone(name: str) -> Awaitable[None]:
            return self._create(name, scale_type, target_rate, rollover_size_bytes)

        if len(names) <= 1:
            await _for_each(names, alone)
            return
        by_owner: dict[HostAddress, list[str]] = {}
        for name in names:
            by_owner.setdefault(self._locator.endpoint_for_segment(name), []).append(name)
        chunks = [
            (endpoint, owned[start : start + _PIPELINED_CREATES])
            for endpoint, owned in by_owner.items()
            for start in range(0, len(owned), _PIPELINED_CREATES)
        ]
        disowned: list[str] = []

        async def pipelined(endpoint: HostAddress, chunk: list[str]) -> None:
            commands = [
                wc.CreateSegment(
                    next_request_id(), name, target_rate, scale_type, self._token(), rollover_size_bytes
                )
                for name in chunk
            ]
            replies = await self._pool.request_many(endpoint, commands)
            failed: Exception | None = None
            for command, reply in zip(commands, replies, strict=True):
                try:
                    expect(command, reply, (wc.SegmentCreated, wc.SegmentAlreadyExists))
                except WrongHostReply:
                    disowned.append(command.segment)
                except Exception as exc:
                    failed = failed or exc
            if failed is not None:
                raise failed

        outcomes = await asyncio.gather(*(pipelined(e, c) for e, c in chunks), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        await _for_each(disowned, alone)

    async def _call(
        self,
        segment: str,
        build: Callable[[int], wc.Command],
        success: type[C] | tuple[type[C], ...],
    ) -> C:
        """One request about `segment` to its owner (a fresh request id per attempt); the reply
        when it is one of `success`, else the exception `replies.failure` names."""

        async def attempt(endpoint: HostAddress) -> C:
            command = build(next_request_id())
            return expect(command, await self._pool.request(endpoint, command), success)

        return await self._on_owner(segment, attempt)

    async def _on_owner(self, segment: str, attempt: Callable[[HostAddress], Awaitable[T]]) -> T:
        """Runs `attempt` against the host the locator names for `segment`, asking the locator
        again after each WrongHost; StoreUnavailable when the hosts keep disowning it."""
        last: WrongHostReply | None = None
        endpoint = HostAddress("", 0)
        for retry in range(_WRONG_HOST_ATTEMPTS):
            endpoint = self._locator.endpoint_for_segment(segment)
            try:
                return await attempt(endpoint)
            except WrongHostReply as wrong:
                last = wrong
            if retry + 1 < _WRONG_HOST_ATTEMPTS:
                await asyncio.sleep(_WRONG_HOST_BACKOFF_S * 2**retry)
        named = last.reply.correct_host if last else ""
        disowned = StoreUnavailable(
            f"segment {segment}: the segment stores disowned it {_WRONG_HOST_ATTEMPTS} times"
        )
        # Addresses are logged with the error id, never sent to the caller.
        disowned.add_note(f"last asked {endpoint}, which named {named!r}")
        raise disowned


def _read_command(
    name: str, offset: int, length: int, token: Callable[[], str]
) -> Callable[[int], wc.Command]:
    return lambda rid: wc.ReadSegment(name, offset, length, token(), rid)


async def _for_each(items: Sequence[str], call: Callable[[str], Awaitable[None]]) -> None:
    """`call` on every item, a few at once; after a failure no new item is started (the store
    is likely down for all of them), and the first failure is raised once the others end."""
    pending = iter(items)
    failures: list[BaseException] = []

    async def worker() -> None:
        for item in pending:
            if failures:
                return
            try:
                await call(item)
            except Exception as exc:
                failures.append(exc)

    await asyncio.gather(*(worker() for _ in range(min(_BATCH_CONCURRENCY, len(items)))))
    if failures:
        raise failures[0]
