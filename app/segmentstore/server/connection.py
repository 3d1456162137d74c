"""One client connection: frames in, one reply per request out, in request order.

Invariant: requests are processed one at a time in arrival order, except appends, which are
handed to storage in arrival order without waiting for the ones before them to commit and are
acknowledged in that order (acks.py: a writer's blocks share group commits), any other request
waiting for the appends before it; a read parked at a segment's tail, which waits in its
own task and answers later, and a CreateSegment, which runs in its own task (up to
MAX_CONCURRENT_CREATES at once) and answers when done, as Pravega's store answers requests in the
order they complete; every reply echoes its request's id; nothing is sent unasked; a
malformed frame, a protocol violation or an unexpected failure closes this connection only.
What waits for a slow peer is bounded: one request's reply, one woken read's reply, and at most
MAX_PARKED_READS parked reads. What a peer can make it hold before it is trusted (it said Hello,
or with authentication on, presented a valid delegation token) is a frame of
`untrusted_frame_bytes`; unfinished large frames and unread replies count against budgets shared
by the port (limits.py), and a frame must arrive within its deadline.

Every command is dispatched by one lookup in ROUTES, keyed by its type and built once from the
codec's declarations: its `Route` names the flow it takes (the handshake, an append, a read, a
create, or the plain request: ownership and token checks, then one reply), what computes its reply
and what a refusal of it echoes. Every declared command has a route; a reply or a nested frame
at the top level takes the plain flow, whose answer is a protocol violation. While a request is
served, its wire request id is the log context's request id (app/observability/context.py), so
every line logged for it names it, as Pravega's store tags its lines; the controller logs the same
id beside its caller's (client/tracing.py). Appends are not tagged: per event, it would cost the
data plane's hottest path for lines it hardly ever logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.domain.errors import StoreUnavailable
from app.metrics.record import StoreTraffic
from app.observability import context
from app.observability.throttled_log import ThrottledWarning
from app.security.tokens import Permission, Verdict
from app.segmentstore import storage as st
from app.segmentstore.server.acks import AckPipeline
from app.segmentstore.server.appends import Appends, ProtocolViolation
from app.segmentstore.server.arriving import Arrival, ArrivingAppends
from app.segmentstore.server.handlers import Handlers
from app.segmentstore.server.limits import (
    SLOW_READER_BYTES,
    UNCOUNTED_FRAME_BYTES,
    ConnectionLimits,
    FrameBudget,
    ReplyBacklog,
)
from app.segmentstore.server.ownership import ContainerOwnership, requested_segments
from app.segmentstore.server.reads import DataReply, ReadReply, Reads, read_size
from app.segmentstore.server.refusals import RefusalContext, refusal_reply
from app.segmentstore.server.tails import Tails, TailWatch
from app.segmentstore.server.tokens import TokenGate, refusal
from app.segmentstore.server.transients import Transients, transient_name
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import (
    HEADER_SIZE,
    MalformedCommand,
    decode,
    encode,
    frame_header,
    read_token_prefix,
)
from app.turns import EndOfTurn

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
# A request the database cannot serve now (out of disk space, restarting) closes its connection,
# as Pravega's store closes on a failure it has no reply for: the clients reconnect and resend
# what was not acknowledged, which the writer's event numbers deduplicate (an ErrorMessage would
# leave the Rust client's append in flight forever). The close waits this long first, because
# that client reconnects and resends at once, without a backoff: a full disk must not turn each
# writer into hundreds of failing appends (and getURI calls) per second.
STORAGE_FAILURE_CLOSE_DELAY_S: Final = 1.0

# What a connection is waiting for, as the port's sweep sees it.
_HEADER: Final = 0
_PAYLOAD: Final = 1
_SERVING: Final = 2


class Refused(Exception):
    """A frame this connection may not send now (too large before it is trusted, or past the
    port's budget of unfinished frames): the connection is closed, logged once per interval."""


class NotReady(Exception):
    """This store cannot tell now whether it owns a request's container (its heartbeats stopped
    landing: the database is out of its reach). Pravega's store closes the connection for a
    container that is not running (IllegalContainerStateException) and so does this one: the
    clients reconnect with back-off, where a WrongHost sends them straight back through getURI,
    which names this store again while the map cannot change (hundreds of calls a second)."""


@dataclass(frozen=True, slots=True)
class PortShare:
    """What the connections of one port share: their limits and budgets."""

    limits: ConnectionLimits
    frames: FrameBudget
    replies: ReplyBacklog
    # A burst of large reads cannot fetch more than this many replies' bytes at once.
    reads: asyncio.Semaphore
    # Closures a peer can cause at will, so logged once per interval with a count.
    closures: ThrottledWarning
    # Requests the database could not serve: every writer fails at once, and retries.
    storage_failures: ThrottledWarning
    # Appends received and not yet handed to storage, by writer (a writer's setup waits for them).
    arriving: ArrivingAppends

    @classmethod
    def of(cls, limits: ConnectionLimits) -> PortShare:
        return cls(
            limits,
            FrameBudget(limits.frame_budget_bytes),
            ReplyBacklog(limits.reply_budget_bytes),
            asyncio.Semaphore(limits.reads_at_once),
            ThrottledWarning(log, "segment store connection closed"),
            ThrottledWarning(
                log, "segment store request failed, its connection closed for the client to retry"
            ),
            ArrivingAppends(),
        )


# A route's parts, each taking the command its route is keyed by (so typed Any here).
Serve = Callable[["Connection", Any, "Route"], Awaitable[bool]]
Answer = Callable[["Connection", Any], Awaitable[wc.Command]]
Echo = Callable[[Any], RefusalContext]


async def _not_a_request(_connection: Connection, cmd: wc.Command) -> wc.Command:
    # A reply type, or a nested frame (Event, PartialEvent, Padding) at the top level.
    raise ProtocolViolation(f"{type(cmd).__name__} is not a request")


def _echo_request_id(cmd: Any) -> RefusalContext:
    return RefusalContext(cmd.request_id)


@dataclass(frozen=True, slots=True)
class Route:
    """How a connection handles one command type. `serve`: the flow (the checks it passes, and
    whether it answers inline, in a task of its own or later; False closes the connection);
    `answer`: the reply it computes; `echo`: what a refusal reply reports besides the refusal
    (the request id, and for some an offset or a writer); `tagged`: its wire request id is the
    log context's request id while it is served (and in the tasks it starts)."""

    serve: Serve
    answer: Answer = _not_a_request
    echo: Echo = _echo_request_id
    tagged: bool = True


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
        share: PortShare | None = None,
    ) -> None:
        self._reader = reader
        self._share = share if share is not None else PortShare.of(ConnectionLimits())
        # Trusted: it said Hello (with authentication on: presented a valid token); until then its
        # frames are small.
        self._helloed = False
        self._trusted = False
        # Set up writers or creates in flight: a silent connection is not idle then.
        self._busy = False
        self._waiting = _HEADER
        self.opened_at = self._frame_since = time.monotonic()
        # The budget an AppendBlock holds until its AppendBlockEnd arrives (its bytes stay here).
        self._block_bytes = 0
        self._aborted: str | None = None
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
        self._appends = Appends(storage, tails, traffic, self._share.arriving)
        self._acks = AckPipeline(self._send_acks, self._append_failed)
        self._reads = Reads(storage, tails, tail_wait_s, traffic)
        self._transients = Transients(transient_tag)
        self._parked: dict[asyncio.Task[None], wc.ReadSegment] = {}
        self._creates: set[asyncio.Task[None]] = set()
        # Replies of concurrent creates finished in one loop turn, sent together at its end.
        self._outbox: list[bytes] = []
        self._outbox_turn = EndOfTurn(self._flush_outbox)
        self._reply_turn = asyncio.Lock()
        self._peer = writer.get_extra_info("peername")

    async def run(self) -> None:
        log.debug("segment store connection from %s opened", self._peer)
        reason = "closed by peer"
        try:
            while True:
                try:
                    cmd = await self._next_command()
                except asyncio.IncompleteReadError:
                    break
                except MalformedCommand as exc:
                    reason = f"malformed frame: {exc}"
                    log.warning("segment store connection from %s: %s", self._peer, reason)
                    break
                except Refused as exc:
                    reason = str(exc)
                    self._share.closures.record(f"{self._peer}: {reason}")
                    break
                if not await self._process(cmd):
                    reason = f"closed after {type(cmd).__name__}"
                    break
        except NotReady as exc:
            # Every connection meets it at once in an outage: counted, not one line each.
            reason = str(exc)
            self._share.closures.record(f"{self._peer}: {reason}")
        except ProtocolViolation as exc:
            reason = f"protocol violation: {exc}"
            log.warning("segment store connection from %s: %s", self._peer, reason)
        except (ConnectionError, OSError) as exc:
            reason = self._aborted or f"connection lost: {exc!r}"
        except asyncio.CancelledError:
            reason = "server closing"
            raise
        except Exception:
            reason = "unexpected failure"
            log.exception("segment store connection from %s failed", self._peer)
        finally:
            await self._finish(reason)

    # --- frames in ---------------------------------------------------------------------------------

    async def _next_command(self) -> wc.Command:
        reader = self._reader
        self._waiting = _HEADER
        type_code, length = frame_header(await reader.readexactly(HEADER_SIZE))
        if not self._block_bytes:
            # An open AppendBlock's deadline runs on until its end has arrived.
            self._frame_since = time.monotonic()
        self._waiting = _PAYLOAD
        if length <= UNCOUNTED_FRAME_BYTES:
            payload = await reader.readexactly(length)
            held = 0
        else:
            payload, held = await self._read_large(type_code, length)
        if self._block_bytes:
            self._share.frames.give(self._block_bytes)
        self._block_bytes = held
        self._waiting = _SERVING
        return decode(type_code, payload)

    async def _read_large(self, type_code: int, length: int) -> tuple[bytes, int]:
        """The payload, and the budget it still holds (an AppendBlock's, until its end)."""
        prefix = b""
        if not self._trusted and length > self._share.limits.untrusted_frame_bytes:
            prefix = await self._vouched_prefix(type_code, length)
        frames = self._share.frames
        if not frames.take(length):
            raise Refused(
                f"a frame of {length} bytes does not fit the port's budget of unfinished frames "
                f"({frames.taken} bytes taken)"
            )
        try:
            rest = await self._reader.readexactly(length - len(prefix))
        except BaseException:
            frames.give(length)
            raise
        if type_code == wc.AppendBlock.TYPE:
            return rest, length
        frames.give(length)
        return (prefix + rest if prefix else rest), 0

    async def _vouched_prefix(self, type_code: int, length: int) -> bytes:
        """A large frame from a connection not yet trusted: with authentication on, after Hello, it
        is read on if its payload begins with a valid delegation token (a table update can be a
        connection's first request); the bytes read so far are returned."""
        if self._tokens is None or not self._helloed:
            raise Refused(f"frame of {length} bytes before Hello")
        fields = await read_token_prefix(self._reader, type_code, length)
        if fields is None:
            raise Refused(f"frame of {length} bytes before a valid delegation token")
        prefix, segment, token = fields
        if not self._tokens.verifier.verify(token, segment, Permission.READ).ok:
            raise Refused(f"frame of {length} bytes with an invalid delegation token")
        self._trusted = True
        return prefix

    def overdue(self, now: float) -> str | None:
        """Why the port's sweep must close this connection now, or None."""
        limits = self._share.limits
        if self._waiting == _PAYLOAD or self._block_bytes:
            if now - self._frame_since > limits.frame_deadline_s:
                return f"a frame not complete after {limits.frame_deadline_s} s"
            return None
        if self._waiting != _HEADER:
            return None
        if not self._helloed:
            if now - self.opened_at > limits.hello_timeout_s:
                return f"no Hello within {limits.hello_timeout_s} s"
            return None
        if self._busy or self._parked or self._creates:
            return None
        if now - self._frame_since > limits.idle_timeout_s:
            return f"idle for {limits.idle_timeout_s} s"
        return None

    def abort(self, reason: str) -> None:
        """Closes the connection at once, dropping what it has queued (its reader sees it lost)."""
        if self._aborted is None:
            self._aborted = reason
            self._share.closures.record(f"{self._peer}: {reason}")
            self._writer.transport.abort()

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
        route = ROUTES[type(cmd)]
        if self._acks and route.serve not in _PIPELINED:
            # Any other request is answered after the appends before it, as when they were stored
            # one at a time (a SetupAppend reads the writer's committed event number).
            await self._acks.drain()
        try:
            if not route.tagged:
                return await route.serve(self, cmd, route)
            tag = context.request_id.set(str(route.echo(cmd).request_id))
            try:
                return await route.serve(self, cmd, route)
            finally:
                context.request_id.reset(tag)
        except StoreUnavailable as exc:
            self._storage_failed(type(cmd).__name__, exc)
            await asyncio.sleep(STORAGE_FAILURE_CLOSE_DELAY_S)
            return False

    def _storage_failed(self, what: str, exc: StoreUnavailable) -> None:
        # The driver's first line (a note the store adds) says what the database said.
        driver = next(iter(getattr(exc, "__notes__", ())), "")
        detail = f"{self._peer}: {what}: {exc}"
        self._share.storage_failures.record(f"{detail} ({driver.splitlines()[0]})" if driver else detail)

    # --- the flows --------------------------------------------------------------------------------

    async def _hello(self, cmd: wc.Hello, _route: Route) -> bool:
        self._helloed = True
        self._trusted = self._tokens is None
        await self._send(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))
        compatible = cmd.low_version <= wc.WIRE_VERSION and cmd.high_version >= wc.OLDEST_COMPATIBLE_VERSION
        if not compatible:
            log.warning(
                "segment store connection from %s: incompatible versions %d..%d",
                self._peer,
                cmd.low_version,
                cmd.high_version,
            )
        return compatible

    async def _keep_alive(self, _cmd: wc.KeepAlive, _route: Route) -> bool:
        await self._send(wc.KeepAlive())
        return True

    async def _append_block(self, cmd: wc.AppendBlock, _route: Route) -> bool:
        # Checked with its AppendBlockEnd, which names the same writer.
        self._appends.append_block(cmd)
        return True

    async def _request(self, cmd: wc.Command, route: Route) -> bool:
        """The plain flow: refused (WrongHost, AuthTokenCheckFailed), or answered inline."""
        refused = self._refusal(cmd, route)
        await self._send(refused if refused is not None else await self._reply(cmd, route))
        return True

    async def _setup_append(self, cmd: wc.SetupAppend, route: Route) -> bool:
        """The plain flow, keeping the accepted token: each of the writer's blocks re-checks its
        expiry."""
        refused: wc.Command | None = self._wrong_host(requested_segments(cmd), cmd, route)
        if refused is None and self._tokens is not None:
            verdict = self._tokens.check(cmd)
            refused = self._token_refusal(verdict, cmd, route)
            if refused is None and verdict is not None:
                self._writer_tokens[cmd.writer_id] = verdict
        reply = refused if refused is not None else await self._reply(cmd, route)
        if isinstance(reply, wc.AppendSetup):
            self._busy = self._trusted = True
        await self._send(reply)
        return True

    async def _append(
        self, cmd: wc.AppendBlockEnd | wc.ConditionalBlockEnd | wc.ConditionalAppend, route: Route
    ) -> bool:
        """An append names its writer, not a segment: ownership is its writer's segment's, and
        its token was checked at SetupAppend (only its expiry is, here)."""
        segment = self._appends.segment_of(cmd.writer_id)
        wrong = self._wrong_host(() if segment is None else (segment,), cmd, route)
        if wrong is not None:
            self._appends.abandon_block()
            await self._send(wrong)
            return True
        if self._tokens is not None:
            accepted = self._writer_tokens.get(cmd.writer_id)
            if accepted is not None and not self._tokens.still_valid(accepted):
                # Pravega's store closes the connection then too: the client connects again and
                # sets up with a fresh token, re-sending what was not acknowledged.
                log.info("segment store connection from %s: a writer's delegation token expired", self._peer)
                return False
        arrival = None if segment is None else self._share.arriving.arriving(segment, cmd.writer_id)
        task = None
        try:
            if segment is not None and (admission := self._storage.admission(segment)) is not None:
                await admission
            request = self._appends.request_of(cmd)
            task = await self._acks.start(self._acked(request, cmd, route, arrival), len(request.data))
        finally:
            if arrival is not None:
                if task is None:
                    arrival.handed_over()  # refused, or its connection broke: never stored
                else:
                    # Dropped unstarted when the connection breaks first (else `store` hands it over).
                    task.add_done_callback(arrival.handed_over)
        return True

    async def _acked(
        self,
        request: st.AppendRequest,
        cmd: wc.AppendBlockEnd | wc.ConditionalBlockEnd | wc.ConditionalAppend,
        route: Route,
        arrival: Arrival | None,
    ) -> wc.Command:
        try:
            return await self._appends.store(request, cmd.request_id, arrival)
        except st.StorageError as exc:
            reply = refusal_reply(route.echo(cmd), exc)
            if reply is None:
                raise
            return reply

    async def _append_failed(self, exc: BaseException) -> None:
        """An append in flight raised what no reply answers: the connection closes, as it did
        when appends were stored one at a time."""
        if isinstance(exc, StoreUnavailable):
            self._storage_failed("append", exc)
            await asyncio.sleep(STORAGE_FAILURE_CLOSE_DELAY_S)
        else:
            log.error("segment store connection from %s: an append failed", self._peer, exc_info=exc)
        self.abort(f"an append failed: {type(exc).__name__}")

    async def _read_segment(self, cmd: wc.ReadSegment, route: Route) -> bool:
        refused = self._refusal(cmd, route)
        if refused is not None:
            await self._send(refused)
        else:
            await self._read(cmd, route)
        return True

    async def _create_segment(self, cmd: wc.CreateSegment, route: Route) -> bool:
        refused = self._refusal(cmd, route)
        if refused is not None:
            await self._send(refused)
        elif (
            len(self._creates) < MAX_CONCURRENT_CREATES
            # A peer that does not read its replies gets the inline path, which waits for them to
            # drain: what its pipelined creates queue here stays bounded.
            and not self._writer.transport.get_write_buffer_size()
        ):
            task = asyncio.create_task(self._create_concurrently(cmd, route))
            self._creates.add(task)
            task.add_done_callback(self._creates.discard)
        else:
            await self._send(await self._reply(cmd, route))
        return True

    # --- the checks -------------------------------------------------------------------------------

    def _refusal(self, cmd: wc.Command, route: Route) -> wc.Command | None:
        """WrongHost or AuthTokenCheckFailed when this store must not serve `cmd`; None to serve it."""
        wrong = self._wrong_host(requested_segments(cmd), cmd, route)
        if wrong is not None or self._tokens is None:
            return wrong
        return self._token_refusal(self._tokens.check(cmd), cmd, route)

    def _token_refusal(self, verdict: Verdict | None, cmd: wc.Command, route: Route) -> wc.Command | None:
        if verdict is None:
            return None
        if verdict.ok:
            self._trusted = True
            return None
        log.warning(
            "segment store connection from %s: %s refused, delegation token %s",
            self._peer,
            type(cmd).__name__,
            verdict.outcome.value,
        )
        return refusal(route.echo(cmd).request_id, verdict)

    def _wrong_host(self, segments: tuple[str, ...], cmd: wc.Command, route: Route) -> wc.WrongHost | None:
        """WrongHost (no host named, as Java answers) for a request on a container this store
        does not own; the client asks the controller's getURI again."""
        if self._ownership is None:
            return None
        if segments and not self._ownership.loaded:
            raise NotReady("its containers are not ready: the database is out of its reach")
        for segment in segments:
            if not self._ownership.owns(segment):
                return wc.WrongHost(route.echo(cmd).request_id, segment, "", "")
        return None

    # --- the answers ------------------------------------------------------------------------------

    async def _reply(self, cmd: wc.Command, route: Route) -> wc.Command:
        try:
            return await route.answer(self, cmd)
        except st.StorageError as exc:
            reply = refusal_reply(route.echo(cmd), exc)
            if reply is None:
                raise
            return reply

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

    async def _merge_segments(self, cmd: wc.MergeSegments) -> wc.Command:
        reply = await self._handlers.merge_segments(cmd)
        # Merged away: nothing of it is left to delete when this connection closes.
        self._transients.discard(cmd.source)
        return reply

    async def _unsupported(
        self, cmd: wc.LocateOffset | wc.FlushToStorage | wc.ListStorageChunks
    ) -> wc.Command:
        return wc.OperationUnsupported(cmd.request_id, type(cmd).__name__, "")

    # --- creates in tasks of their own -------------------------------------------------------------

    async def _create_concurrently(self, cmd: wc.CreateSegment, route: Route) -> None:
        try:
            reply = await self._reply(cmd, route)
        except StoreUnavailable as exc:
            self._storage_failed(type(cmd).__name__, exc)
            self._writer.close()
            return
        except Exception:
            log.exception("segment store connection from %s: a CreateSegment failed", self._peer)
            self._writer.close()
            return
        self._outbox.append(encode(reply))
        self._outbox_turn.ask()

    def _flush_outbox(self) -> None:
        # One send for every create answered in this turn; each frame is whole, so frames never
        # interleave with the ones _send writes.
        frames, self._outbox = self._outbox, []
        if frames and not self._writer.transport.is_closing():
            self._writer.write(b"".join(frames))

    # --- reads ------------------------------------------------------------------------------------

    async def _read(self, cmd: wc.ReadSegment, route: Route) -> None:
        replies = self._share.replies
        try:
            async with self._share.reads:
                # The reply's bytes count from before they are fetched (the reply and its queued
                # copy): past the budget, the readers that stopped reading go before they exist.
                replies.hold(
                    self, self._writer.transport.get_write_buffer_size() + 2 * read_size(cmd.suggested_length)
                )
                outcome = await self._reads.read(cmd)
        except st.StorageError as exc:
            reply = refusal_reply(route.echo(cmd), exc)
            if reply is None:
                raise
            outcome = reply
        finally:
            replies.release(self)
        if isinstance(outcome, TailWatch) and len(self._parked) >= MAX_PARKED_READS:
            outcome.cancel()
            outcome = wc.SegmentRead(cmd.segment, cmd.offset, True, False, b"", cmd.request_id)
        if isinstance(outcome, TailWatch):
            task = asyncio.create_task(self._parked_read(cmd, route, outcome))
            self._parked[task] = cmd
            task.add_done_callback(self._forget_parked)
        else:
            await self._send(outcome)

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

    async def _parked_read(self, cmd: wc.ReadSegment, route: Route, watch: TailWatch) -> None:
        try:
            try:
                reply = await self._reads.wait_at_tail(cmd, watch, self._woken_reply_slot)
            except st.StorageError as exc:
                refused = refusal_reply(route.echo(cmd), exc)
                if refused is None:
                    raise
                reply = refused
            await self._send(reply)
        except (ConnectionError, OSError):
            # The peer left while its read waited: there is nobody to answer.
            return
        except StoreUnavailable as exc:
            self._storage_failed(type(cmd).__name__, exc)
            self._writer.close()
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

    # --- sending and closing ------------------------------------------------------------------------

    async def _send(self, reply: ReadReply) -> None:
        # The whole frame is queued before the next await, so frames from parked reads never
        # interleave.
        frames = reply.frames() if isinstance(reply, DataReply) else [encode(reply)]
        if self._traffic is not None:
            if isinstance(reply, DataReply):
                self._traffic.read(reply.size)
            elif isinstance(reply, wc.SegmentRead):
                self._traffic.read(len(reply.data))
        await self._send_frames(frames)

    async def _send_acks(self, replies: Sequence[wc.Command]) -> None:
        # The appends of one group commit end together: their replies leave in one write, not
        # one system call each (a pipelining writer has many blocks in a group).
        if len(replies) == 1:
            await self._send_frames([encode(replies[0])])
        else:
            await self._send_frames([b"".join(encode(reply) for reply in replies)])

    async def _send_frames(self, frames: Sequence[bytes]) -> None:
        size = 0
        for frame in frames:
            size += len(frame)
            self._writer.write(frame)
        queued = self._writer.transport.get_write_buffer_size()
        if queued <= SLOW_READER_BYTES:
            await self._writer.drain()
            return
        replies = self._share.replies
        # The reply itself stays alive (its caller holds it) while the transport's copy drains.
        replies.hold(self, queued + size)
        try:
            await self._writer.drain()
        finally:
            replies.release(self)

    async def _finish(self, reason: str) -> None:
        await self._acks.close()
        if self._block_bytes:
            self._share.frames.give(self._block_bytes)
            self._block_bytes = 0
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


# --- the dispatch table ---------------------------------------------------------------------------


def _by_handlers(method: Callable[[Handlers, Any], Awaitable[wc.Command]]) -> Answer:
    """An answer of the server's shared Handlers (requests that need no per-connection state)."""

    def answer(connection: Connection, cmd: Any) -> Awaitable[wc.Command]:
        return method(connection._handlers, cmd)

    return answer


# The flows that do not wait for the appends in flight: the appends themselves.
_PIPELINED: Final = frozenset({Connection._append_block, Connection._append})


def _by_appends(method: Callable[[Appends, Any], Awaitable[wc.Command]]) -> Answer:
    """An answer of the connection's writers."""

    def answer(connection: Connection, cmd: Any) -> Awaitable[wc.Command]:
        return method(connection._appends, cmd)

    return answer


def _echo_read(cmd: wc.ReadSegment) -> RefusalContext:
    return RefusalContext(cmd.request_id, cmd.offset)


def _echo_truncation(cmd: wc.TruncateSegment) -> RefusalContext:
    return RefusalContext(cmd.request_id, cmd.truncation_offset)


def _echo_block_end(cmd: wc.AppendBlockEnd) -> RefusalContext:
    return RefusalContext(cmd.request_id, cmd.last_event_number, cmd.writer_id, cmd.last_event_number)


def _echo_conditional(cmd: wc.ConditionalBlockEnd | wc.ConditionalAppend) -> RefusalContext:
    return RefusalContext(cmd.request_id, cmd.event_number, cmd.writer_id, cmd.event_number)


def _echo_table_offset(cmd: wc.UpdateTableEntries | wc.RemoveTableKeys) -> RefusalContext:
    return RefusalContext(cmd.request_id, cmd.table_segment_offset)


def _plain(answer: Answer, echo: Echo = _echo_request_id) -> Route:
    return Route(Connection._request, answer, echo)


_REQUESTS: Final[dict[type[wc.Command], Route]] = {
    # The handshake and the append path, before any check (they name no segment, carry no token),
    # and untagged (no request id, or one per event).
    wc.Hello: Route(Connection._hello, tagged=False),
    wc.KeepAlive: Route(Connection._keep_alive, tagged=False),
    wc.AppendBlock: Route(Connection._append_block, tagged=False),
    wc.SetupAppend: Route(Connection._setup_append, _by_appends(Appends.setup_append)),
    wc.AppendBlockEnd: Route(
        Connection._append, _by_appends(Appends.append_block_end), _echo_block_end, tagged=False
    ),
    wc.ConditionalBlockEnd: Route(
        Connection._append, _by_appends(Appends.conditional_block_end), _echo_conditional, tagged=False
    ),
    wc.ConditionalAppend: Route(
        Connection._append, _by_appends(Appends.conditional_append), _echo_conditional, tagged=False
    ),
    # Reads may park; creates may run in tasks of their own.
    wc.ReadSegment: Route(Connection._read_segment, echo=_echo_read),
    wc.CreateSegment: Route(Connection._create_segment, _by_handlers(Handlers.create_segment)),
    # Requests with per-connection state: transient segments live as long as their connection.
    wc.CreateTransientSegment: _plain(Connection._create_transient),
    wc.MergeSegments: _plain(Connection._merge_segments),
    # Segment administration, attributes, merges and table segments.
    wc.SealSegment: _plain(_by_handlers(Handlers.seal_segment)),
    wc.DeleteSegment: _plain(_by_handlers(Handlers.delete_segment)),
    wc.TruncateSegment: _plain(_by_handlers(Handlers.truncate_segment), _echo_truncation),
    wc.UpdateSegmentPolicy: _plain(_by_handlers(Handlers.update_segment_policy)),
    wc.GetStreamSegmentInfo: _plain(_by_handlers(Handlers.get_stream_segment_info)),
    wc.GetSegmentAttribute: _plain(_by_handlers(Handlers.get_segment_attribute)),
    wc.UpdateSegmentAttribute: _plain(_by_handlers(Handlers.update_segment_attribute)),
    wc.MergeSegmentsBatch: _plain(_by_handlers(Handlers.merge_segments_batch)),
    wc.CreateTableSegment: _plain(_by_handlers(Handlers.create_table_segment)),
    wc.DeleteTableSegment: _plain(_by_handlers(Handlers.delete_table_segment)),
    wc.GetTableSegmentInfo: _plain(_by_handlers(Handlers.get_table_segment_info)),
    wc.UpdateTableEntries: _plain(_by_handlers(Handlers.update_table_entries), _echo_table_offset),
    wc.RemoveTableKeys: _plain(_by_handlers(Handlers.remove_table_keys), _echo_table_offset),
    wc.ReadTable: _plain(_by_handlers(Handlers.read_table)),
    wc.ReadTableKeys: _plain(_by_handlers(Handlers.read_table_keys)),
    wc.ReadTableEntries: _plain(_by_handlers(Handlers.read_table_entries)),
    wc.ReadTableEntriesDelta: _plain(_by_handlers(Handlers.read_table_entries_delta)),
    # Checked like any request (a WrongHost or a token refusal first), then refused.
    **{cls: _plain(Connection._unsupported) for cls in UNSUPPORTED},
}

# Every declared command's route. Replies and nested frames take the plain flow: checked as any
# request is (one naming a segment carries no token, so with authentication on it is refused, as
# tokens.py promises), then answered by closing the connection; untagged, as some carry no id.
ROUTES: Final[dict[type[wc.Command], Route]] = {
    cls: _REQUESTS.get(cls, Route(Connection._request, tagged=False)) for cls in wc.COMMANDS.values()
}
