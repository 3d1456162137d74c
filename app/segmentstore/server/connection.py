"""One client connection: frames in, one reply per request out, in request order.

Invariant: requests are processed one at a time in arrival order (so a writer's appends are
stored and acknowledged in order), except a read parked at a segment's tail, which waits in its
own task and answers later, and a CreateSegment, which runs in its own task (up to
MAX_CONCURRENT_CREATES at once) and answers when done, as Pravega's store answers requests in the
order they complete; every reply echoes its request's id; nothing is sent unasked; a
malformed frame, a protocol violation or an unexpected failure closes this connection only.
What waits for a slow peer is bounded: one request's reply, one woken read's reply, and at most
MAX_PARKED_READS parked reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Final, Literal

from app.metrics.record import StoreTraffic
from app.security.tokens import Verdict
from app.segmentstore import storage as st
from app.segmentstore.server.appends import Appends, ProtocolViolation
from app.segmentstore.server.handlers import Handlers
from app.segmentstore.server.ownership import ContainerOwnership, requested_segments
from app.segmentstore.server.reads import Reads
from app.segmentstore.server.refusals import RefusalContext, refusal_reply
from app.segmentstore.server.tails import Tails, TailWatch
from app.segmentstore.server.tokens import TokenGate, refusal
from app.segmentstore.server.transients import Transients, transient_name
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import MalformedCommand, encode, read_command

log = logging.getLogger(__name__)

# Requests of later protocol versions or of the admin port: decodable, but not served here.
UNSUPPORTED: Final[frozenset[type[wc.Command]]] = frozenset(
    {wc.LocateOffset, wc.FlushToStorage, wc.ListStorageChunks}
)
# Reads parked at once on one connection (a Java client parks one per segment it reads). Beyond
# it a tail read answers at once, empty, as an expired wait would: the client simply asks again.
MAX_PARKED_READS: Final = 1024
# CreateSegments of one connection in their own tasks at once (the controller pipelines a
# transaction's segments on one connection; run together, the store groups their rows into one
# statement and their replies leave in one send). Beyond it a create waits its turn inline.
MAX_CONCURRENT_CREATES: Final = 64


def refusal_context(cmd: wc.Command) -> RefusalContext:
    """What a refusal reply of `cmd` reports besides the refusal."""
    if isinstance(cmd, wc.ReadSegment):
        return RefusalContext(cmd.request_id, cmd.offset)
    if isinstance(cmd, wc.TruncateSegment):
        return RefusalContext(cmd.request_id, cmd.truncation_offset)
    if isinstance(cmd, wc.AppendBlockEnd):
        return RefusalContext(cmd.request_id, cmd.last_event_number, cmd.writer_id, cmd.last_event_number)
    if isinstance(cmd, (wc.ConditionalBlockEnd, wc.ConditionalAppend)):
        return RefusalContext(cmd.request_id, cmd.event_number, cmd.writer_id, cmd.event_number)
    if isinstance(cmd, (wc.UpdateTableEntries, wc.RemoveTableKeys)):
        return RefusalContext(cmd.request_id, cmd.table_segment_offset)
    request_id = getattr(cmd, "request_id", -1)
    return RefusalContext(request_id if isinstance(request_id, int) else -1)


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        storage: st.SegmentStorage,
        tails: Tails,
        handlers: Handlers,
        tail_wait_s: float,
        ownership: ContainerOwnership | None = None,
        tokens: TokenGate | None = None,
        traffic: StoreTraffic | None = None,
        transient_tag: int | None = None,
    ) -> None:
        self._reader = reader
        # The store's data-plane counters (app/metrics); None in protocol tests of a bare store.
        self._traffic = traffic
        # None: authentication is off and tokens are not looked at (as Pravega's PassingTokenVerifier).
        self._tokens = tokens
        # The verdict on each set-up writer's token, re-checked for expiry at every append block.
        self._writer_tokens: dict[int, Verdict] = {}
        self._ownership = ownership
        self._writer = writer
        self._storage = storage
        self._handlers = handlers
        self._appends = Appends(storage, tails, traffic)
        self._reads = Reads(storage, tails, tail_wait_s)
        self._transients = Transients(transient_tag)
        self._parked: dict[asyncio.Task[None], wc.ReadSegment] = {}
        self._creates: set[asyncio.Task[None]] = set()
        # Replies of concurrent creates finished in one loop turn, sent together at its end.
        self._outbox: list[bytes] = []
        self._reply_turn = asyncio.Lock()
        self._peer = writer.get_extra_info("peername")

    async def run(self) -> None:
        log.debug("segment store connection from %s opened", self._peer)
        reason = "closed by peer"
        try:
            while True:
                try:
                    cmd = await read_command(self._reader)
                except asyncio.IncompleteReadError:
                    break
                except MalformedCommand as exc:
                    reason = f"malformed frame: {exc}"
                    log.warning("segment store connection from %s: %s", self._peer, reason)
                    break
                if not await self._process(cmd):
                    reason = f"closed after {type(cmd).__name__}"
                    break
        except ProtocolViolation as exc:
            reason = f"protocol violation: {exc}"
            log.warning("segment store connection from %s: %s", self._peer, reason)
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc!r}"
        except asyncio.CancelledError:
            reason = "server closing"
            raise
        except Exception:
            reason = "unexpected failure"
            log.exception("segment store connection from %s failed", self._peer)
        finally:
            await self._finish(reason)

    def transient_segments(self) -> frozenset[str]:
        """The transient segments this connection created and has not seen merged or deleted."""
        return self._transients.names()

    async def answer_parked_reads(self) -> None:
        """Waits for the parked reads to answer (the server woke them all while closing)."""
        if self._parked:
            await asyncio.gather(*self._parked, return_exceptions=True)

    async def _process(self, cmd: wc.Command) -> bool:
        """Handles one frame; False when the connection must close."""
        self._appends.expect_block_end(cmd)
        if isinstance(cmd, wc.Hello):
            await self._send(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))
            compatible = (
                cmd.low_version <= wc.WIRE_VERSION and cmd.high_version >= wc.OLDEST_COMPATIBLE_VERSION
            )
            if not compatible:
                log.warning(
                    "segment store connection from %s: incompatible versions %d..%d",
                    self._peer,
                    cmd.low_version,
                    cmd.high_version,
                )
            return compatible
        if isinstance(cmd, wc.KeepAlive):
            await self._send(wc.KeepAlive())
            return True
        if isinstance(cmd, wc.AppendBlock):
            self._appends.append_block(cmd)
            return True
        wrong = self._wrong_host(cmd)
        if wrong is not None:
            if isinstance(cmd, wc.AppendBlockEnd):
                self._appends.abandon_block()
            await self._send(wrong)
            return True
        if self._tokens is not None:
            refused = self._token_refusal(self._tokens, cmd)
            if refused is False:
                return False
            if refused is not None:
                await self._send(refused)
                return True
        if isinstance(cmd, wc.ReadSegment):
            await self._read(cmd)
            return True
        if (
            isinstance(cmd, wc.CreateSegment)
            and len(self._creates) < MAX_CONCURRENT_CREATES
            # A peer that does not read its replies gets the inline path, which waits for them to
            # drain: what its pipelined creates queue here stays bounded.
            and not self._writer.transport.get_write_buffer_size()
        ):
            task = asyncio.create_task(self._create_concurrently(cmd))
            self._creates.add(task)
            task.add_done_callback(self._creates.discard)
            return True
        reply = await self._reply(cmd)
        await self._send(reply)
        return True

    def _token_refusal(
        self, tokens: TokenGate, cmd: wc.Command
    ) -> wc.AuthTokenCheckFailed | Literal[False] | None:
        """None: serve `cmd`; a reply: its refusal; False: close the connection, because a
        set-up writer's token expired (Pravega's store closes it then too: the client connects
        again and sets up with a fresh token, re-sending what was not acknowledged)."""
        if isinstance(cmd, (wc.AppendBlockEnd, wc.ConditionalBlockEnd, wc.ConditionalAppend)):
            accepted = self._writer_tokens.get(cmd.writer_id)
            if accepted is not None and not tokens.still_valid(accepted):
                log.info("segment store connection from %s: a writer's delegation token expired", self._peer)
                return False
            return None
        verdict = tokens.check(cmd)
        if verdict is None or verdict.ok:
            if verdict is not None and isinstance(cmd, wc.SetupAppend):
                self._writer_tokens[cmd.writer_id] = verdict
            return None
        log.warning(
            "segment store connection from %s: %s refused, delegation token %s",
            self._peer,
            type(cmd).__name__,
            verdict.outcome.value,
        )
        return refusal(refusal_context(cmd).request_id, verdict)

    def _wrong_host(self, cmd: wc.Command) -> wc.WrongHost | None:
        """WrongHost (no host named, as Java answers) for a request on a container this store
        does not own; the client asks the controller's getURI again."""
        if self._ownership is None:
            return None
        segments = requested_segments(cmd)
        if not segments and isinstance(
            cmd, (wc.AppendBlockEnd, wc.ConditionalBlockEnd, wc.ConditionalAppend)
        ):
            segment = self._appends.segment_of(cmd.writer_id)
            segments = () if segment is None else (segment,)
        for segment in segments:
            if not self._ownership.owns(segment):
                return wc.WrongHost(refusal_context(cmd).request_id, segment, "", "")
        return None

    def disown(self, lost: Callable[[str], bool]) -> None:
        """Reads parked on segments `lost` names answer WrongHost at once."""
        for task, cmd in list(self._parked.items()):
            if lost(cmd.segment) and not task.done():
                task.cancel()
                reply = wc.WrongHost(cmd.request_id, cmd.segment, "", "")
                answer = asyncio.create_task(self._send_quietly(reply))
                self._parked[answer] = cmd
                answer.add_done_callback(self._forget_parked)

    async def _send_quietly(self, reply: wc.Command) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self._send(reply)

    def _forget_parked(self, task: asyncio.Task[None]) -> None:
        self._parked.pop(task, None)

    async def _reply(self, cmd: wc.Command) -> wc.Command:
        try:
            return await self._call(cmd)
        except st.StorageError as exc:
            reply = refusal_reply(refusal_context(cmd), exc)
            if reply is None:
                raise
            return reply

    async def _call(self, cmd: wc.Command) -> wc.Command:
        if isinstance(cmd, wc.SetupAppend):
            return await self._appends.setup_append(cmd)
        if isinstance(cmd, wc.AppendBlockEnd):
            return await self._appends.append_block_end(cmd)
        if isinstance(cmd, wc.ConditionalBlockEnd):
            return await self._appends.conditional_block_end(cmd)
        if isinstance(cmd, wc.ConditionalAppend):
            return await self._appends.conditional_append(cmd)
        if isinstance(cmd, wc.CreateTransientSegment):
            return await self._create_transient(cmd)
        handler = self._handlers.by_type.get(type(cmd))
        if handler is not None:
            reply = await handler(cmd)
            if isinstance(cmd, wc.MergeSegments):
                self._transients.discard(cmd.source)
            return reply
        if type(cmd) in UNSUPPORTED:
            request_id = refusal_context(cmd).request_id
            return wc.OperationUnsupported(request_id, type(cmd).__name__, "")
        # A reply type, or a nested frame (Event, PartialEvent, Padding) at the top level.
        raise ProtocolViolation(f"{type(cmd).__name__} is not a request")

    async def _create_concurrently(self, cmd: wc.CreateSegment) -> None:
        try:
            reply = await self._reply(cmd)
        except Exception:
            log.exception("segment store connection from %s: a CreateSegment failed", self._peer)
            self._writer.close()
            return
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush_outbox)
        self._outbox.append(encode(reply))

    def _flush_outbox(self) -> None:
        # One send for every create answered in this turn; each frame is whole, so frames never
        # interleave with the ones _send writes.
        frames, self._outbox = self._outbox, []
        if frames and not self._writer.transport.is_closing():
            self._writer.write(b"".join(frames))

    async def _create_transient(self, cmd: wc.CreateTransientSegment) -> wc.Command:
        # The parent must exist: a transient segment only ever merges into it.
        await self._storage.segment_state(cmd.parent_segment)
        name = transient_name(cmd.parent_segment, cmd.writer_id, self._transients.tag)
        # Named before it exists: the orphan sweep never sees it committed and not yet ours.
        self._transients.add(name)
        try:
            await self._storage.create_segment(name, "transient", 0, 0, 0)
        except BaseException:
            self._transients.discard(name)
            raise
        return wc.SegmentCreated(cmd.request_id, name)

    async def _read(self, cmd: wc.ReadSegment) -> None:
        try:
            outcome = await self._reads.read(cmd)
        except st.StorageError as exc:
            reply = refusal_reply(refusal_context(cmd), exc)
            if reply is None:
                raise
            outcome = reply
        if isinstance(outcome, TailWatch) and len(self._parked) >= MAX_PARKED_READS:
            outcome.cancel()
            outcome = wc.SegmentRead(cmd.segment, cmd.offset, True, False, b"", cmd.request_id)
        if isinstance(outcome, TailWatch):
            task = asyncio.create_task(self._parked_read(cmd, outcome))
            self._parked[task] = cmd
            task.add_done_callback(self._forget_parked)
        else:
            await self._send(outcome)

    async def _parked_read(self, cmd: wc.ReadSegment, watch: TailWatch) -> None:
        try:
            try:
                reply = await self._reads.wait_at_tail(cmd, watch, self._woken_reply_slot)
            except st.StorageError as exc:
                refusal = refusal_reply(refusal_context(cmd), exc)
                if refusal is None:
                    raise
                reply = refusal
            await self._send(reply)
        except (ConnectionError, OSError):
            # The peer left while its read waited: there is nobody to answer.
            return
        except Exception:
            log.exception("segment store connection from %s: a parked read failed", self._peer)
            self._writer.close()

    @contextlib.asynccontextmanager
    async def _woken_reply_slot(self) -> AsyncIterator[None]:
        """One woken read at a time reads its bytes, and only once what was sent before has
        drained below the transport's high-water mark: reads woken together for a peer that is
        slow to read never pile up their 2 MiB replies in memory."""
        async with self._reply_turn:
            await self._writer.drain()
            yield

    async def _send(self, reply: wc.Command) -> None:
        # write() queues the whole frame at once, so frames from parked reads never interleave.
        self._writer.write(encode(reply))
        if self._traffic is not None and isinstance(reply, wc.SegmentRead):
            self._traffic.read(len(reply.data))
        await self._writer.drain()

    async def _finish(self, reason: str) -> None:
        for task in list(self._parked):
            task.cancel()
        if self._parked:
            await asyncio.gather(*self._parked, return_exceptions=True)
        if self._creates:
            # A create the peer sent before leaving still completes (it is idempotent, and the
            # controller's retry finds it done); its reply goes nowhere.
            await asyncio.gather(*self._creates, return_exceptions=True)
        self._flush_outbox()
        deleted = await self._transients.delete_all(self._storage)
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        log.debug(
            "segment store connection from %s closed (%s; %d transient segments deleted)",
            self._peer,
            reason,
            len(deleted),
        )
