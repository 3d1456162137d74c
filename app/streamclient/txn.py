"""Writing events into a Pravega transaction over the wire protocol, and ending it.

A `TxnWriter` creates a transaction through the controller, appends each event to the
transaction's segment of the segment its routing key picks (SetupAppend, then AppendBlockEnd
blocks of whole events, each acknowledged by DataAppended), and keeps the lease alive with
pings. Committing is the controller's (`commit_all`), so whoever decides (a Spark driver) can
commit transactions that other processes wrote.

Invariants: `flush()` returns only when every event written so far is acknowledged by its
segment store; an append that lost its connection is resent on a new one only after the store
said which of the writer's events it holds (AppendSetup's last event number), so no event lands
twice and none is lost; an event the transaction cannot take (it timed out, was aborted, the
stream was sealed) is TransactionFailed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from app.domain.errors import StoreUnavailable
from app.domain.segment_names import transaction_segment_name
from app.segmentstore.client.connections import Connection, ConnectionPool, next_request_id
from app.segmentstore.wire import commands as wc
from app.streamclient.controller import OpenedTxn, StreamController, txn_hex
from app.streamclient.errors import StreamError, StreamUnavailable, TransactionFailed
from app.streamclient.routing import SegmentRouter
from app.streamclient.segments import StreamSegments

# Serialization.MAX_EVENT_SIZE of Pravega's clients: an event's payload, header excluded.
MAX_EVENT_SIZE: Final = 8 * 1024 * 1024
# Events are sent in blocks of about this size (the Rust client's append batches are as big).
BLOCK_SIZE: Final = 1024 * 1024
ATTEMPTS: Final = 4
_EVENT_HEADER: Final = struct.Struct(">ii")

_PING_OK: Final = 0
_PING_COMMITTED: Final = 5
# TxnState.State and TxnStatus.Status numbers (controller.proto).
TXN_OPEN: Final = 1
TXN_COMMITTING: Final = 2
TXN_COMMITTED: Final = 3
TXN_ABORTING: Final = 4
TXN_ABORTED: Final = 5
_STATUS_SUCCESS: Final = 0
_STATUS_TXN_NOT_FOUND: Final = 3
_STATE_NAMES: Final = {0: "UNKNOWN", 1: "OPEN", 2: "COMMITTING", 3: "COMMITTED", 4: "ABORTING", 5: "ABORTED"}


@dataclass
class _Appender:
    """One transaction segment's append session: its connection, the events not yet sent, and the
    writer's last event number on it."""

    segment_id: int
    name: str
    connection: Connection | None = None
    pending: bytearray = field(default_factory=bytearray)
    pending_events: int = 0
    next_number: int = 0


class TxnWriter:
    """Events into one transaction; `close()` when done (it neither commits nor aborts)."""

    def __init__(self, segments: StreamSegments, txn: OpenedTxn, lease_ms: int) -> None:
        self.txn = txn
        self.lease_ms = lease_ms
        self.events_written = 0
        self._segments = segments
        self._router = SegmentRouter(txn.segments)
        self._writer_id = uuid.uuid4().int
        self._appenders: dict[int, _Appender] = {}
        self._closing = contextlib.AsyncExitStack()

    @classmethod
    async def begin(
        cls,
        controller: StreamController,
        scope: str,
        stream: str,
        *,
        lease_ms: int,
        tls: ssl.SSLContext | None = None,
        request_timeout_s: float = 30.0,
    ) -> TxnWriter:
        """A new transaction of `lease_ms`; the segment stores are reached over TLS with `tls`."""
        txn = await controller.create_txn(scope, stream, lease_ms)
        pool = ConnectionPool(timeout_s=request_timeout_s, tls=tls)
        return cls(
            StreamSegments(controller, scope, stream, token=txn.token, write=True, pool=pool), txn, lease_ms
        )

    @property
    def txn_key(self) -> tuple[int, int]:
        return self.txn.high, self.txn.low

    async def write(self, routing_key: str | None, event: bytes) -> None:
        if len(event) > MAX_EVENT_SIZE:
            raise TransactionFailed(
                f"an event of {len(event)} bytes is over Pravega's limit of {MAX_EVENT_SIZE} bytes"
            )
        appender = self._appender(self._router.segment_for(routing_key))
        appender.pending += _EVENT_HEADER.pack(wc.Event.TYPE, len(event))
        appender.pending += event
        appender.pending_events += 1
        self.events_written += 1
        if len(appender.pending) >= BLOCK_SIZE:
            await self._send(appender)

    async def write_all(self, events: Iterable[tuple[str | None, bytes]]) -> None:
        for key, event in events:
            await self.write(key, event)

    async def flush(self) -> None:
        for appender in list(self._appenders.values()):
            if appender.pending_events:
                await self._send(appender)

    async def ping(self) -> None:
        """Renews the lease for `lease_ms` from now; TransactionFailed if it is not open."""
        scope, stream = self._segments.scope, self._segments.stream
        status = await self._segments.controller.ping_txn(scope, stream, self.txn_key, self.lease_ms)
        if status != _PING_OK:
            raise TransactionFailed(
                f"transaction {self.txn.hex_id} on {scope}/{stream} could not be kept open "
                f"(ping answered {status}): it timed out or was ended"
            )

    async def abort(self) -> None:
        segments = self._segments
        await abort_all(segments.controller, segments.scope, segments.stream, [self.txn_key])

    async def close(self) -> None:
        await self._closing.aclose()
        await self._segments.close()

    def _appender(self, segment_id: int) -> _Appender:
        appender = self._appenders.get(segment_id)
        if appender is None:
            parent = self._segments.name(segment_id)
            name = transaction_segment_name(parent, self.txn.high, self.txn.low)
            appender = self._appenders[segment_id] = _Appender(segment_id, name)
        return appender

    async def _send(self, appender: _Appender) -> None:
        """The pending block, acknowledged; resent on a new connection after a loss, from what
        the store says it holds."""
        data = bytes(appender.pending)
        count = appender.pending_events
        last = appender.next_number + count - 1
        why = ""
        for _ in range(ATTEMPTS):
            try:
                connection = await self._connection(appender)
                if appender.next_number > last:
                    break  # the store already held the block (it arrived before the loss)
                block = wc.AppendBlockEnd(self._writer_id, len(data), data, count, last, next_request_id())
                reply = await connection.request(block, self._segments_timeout())
            except StoreUnavailable as exc:
                why = str(exc)
                appender.connection = None
                continue
            if isinstance(reply, wc.DataAppended):
                appender.next_number = last + 1
                break
            raise self._refused(appender, reply)
        else:
            raise StreamUnavailable(
                f"appending to {appender.name}: no answer after {ATTEMPTS} attempts: {why}"
            )
        appender.pending.clear()
        appender.pending_events = 0

    async def _connection(self, appender: _Appender) -> Connection:
        if appender.connection is not None and not appender.connection.broken:
            return appender.connection
        segments = self._segments
        endpoint = await segments.controller.endpoint(segments.scope, segments.stream, appender.segment_id)
        connection = await self._closing.enter_async_context(segments.pool.dedicated(endpoint))
        token = await segments.token()
        reply = await connection.request(
            wc.SetupAppend(next_request_id(), self._writer_id, appender.name, token), self._segments_timeout()
        )
        if not isinstance(reply, wc.AppendSetup):
            raise self._refused(appender, reply)
        # What the store holds of this writer: a block sent before a lost connection may be there.
        appender.next_number = max(appender.next_number, reply.last_event_number + 1)
        appender.connection = connection
        return connection

    def _segments_timeout(self) -> float:
        return self._segments.pool.timeout_s

    def _refused(self, appender: _Appender, reply: wc.Command) -> StreamError:
        match reply:
            case wc.NoSuchSegment() | wc.SegmentIsSealed():
                return TransactionFailed(
                    f"transaction {self.txn.hex_id} takes no more events ({type(reply).__name__} for "
                    f"{appender.name}): it timed out, was committed or aborted, or the stream was sealed"
                )
            case wc.AuthTokenCheckFailed():
                return TransactionFailed(f"{appender.name}: the segment store refused the delegation token")
        return StreamUnavailable(f"appending to {appender.name}: unexpected reply {type(reply).__name__}")


async def commit_all(
    controller: StreamController, scope: str, stream: str, txns: Iterable[tuple[int, int]], lease_ms: int
) -> None:
    """Commits every transaction, or none if one of them can no longer be committed: each is
    first renewed for `lease_ms` (which also says it is still open), and only then are the
    commits asked for, so a transaction that timed out is found before any commit is made. One
    the controller already committed (a retried commit) is fine; one that timed out or was
    aborted is TransactionFailed."""
    pending = list(txns)
    for txn in pending:
        status = await controller.ping_txn(scope, stream, txn, lease_ms)
        if status not in (_PING_OK, _PING_COMMITTED):
            await _refuse(controller, scope, stream, txn)
    for txn in pending:
        if await controller.commit_txn(scope, stream, txn) != _STATUS_SUCCESS:
            await _refuse(controller, scope, stream, txn)


async def _refuse(controller: StreamController, scope: str, stream: str, txn: tuple[int, int]) -> None:
    """Returns if the transaction is committing or committed; raises TransactionFailed else."""
    state = await controller.txn_state(scope, stream, txn)
    if state in (TXN_COMMITTING, TXN_COMMITTED):
        return
    raise TransactionFailed(
        f"transaction {txn_hex(txn)} on {scope}/{stream} cannot be committed: it is "
        f"{_STATE_NAMES.get(state, state)} (its lease ran out before the commit, or it was aborted)"
    )


async def abort_all(
    controller: StreamController, scope: str, stream: str, txns: Iterable[tuple[int, int]]
) -> None:
    """Asks the controller to abort each transaction; one already ended stays as it is."""
    for txn in txns:
        await controller.abort_txn(scope, stream, txn)


async def wait_committed(
    controller: StreamController, scope: str, stream: str, txns: Iterable[tuple[int, int]], timeout_s: float
) -> None:
    """Until every transaction is COMMITTED (its events readable); TransactionFailed if one is
    aborted, StreamUnavailable after `timeout_s`."""
    waiting = list(txns)
    try:
        async with asyncio.timeout(timeout_s):
            while waiting:
                state = await controller.txn_state(scope, stream, waiting[0])
                if state == TXN_COMMITTED:
                    waiting.pop(0)
                elif state in (TXN_ABORTING, TXN_ABORTED):
                    aborted = txn_hex(waiting[0])
                    raise TransactionFailed(f"transaction {aborted} on {scope}/{stream} was aborted")
                else:
                    await asyncio.sleep(0.05)
    except TimeoutError:
        raise StreamUnavailable(
            f"{len(waiting)} transactions on {scope}/{stream} not committed within {timeout_s} s"
        ) from None
