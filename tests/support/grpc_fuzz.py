"""The gRPC fuzz campaign's machinery: a controller with workers served over real gRPC on its own event
loop thread (so a call that blocks that loop is seen as a hang by the test thread), the fixtures a
campaign biases its messages toward, and the record of every call that broke the contract (INTERNAL,
UNKNOWN, UNAVAILABLE with the database up, internals in details, a hang), grouped by cause."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from hypothesis import strategies as st

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import SERVICE_NAME
from app.testing.controller import Services, running_controller
from app.wiring import grpc_extensions
from tests.api.conftest import served
from tests.support.db import clone_database, drop_database, with_database
from tests.support.proto_strategies import (
    I64_MAX,
    INT64_EDGES,
    VALID_NAMES,
    Hints,
    ProtoStrategies,
)

T = TypeVar("T")

CALL_TIMEOUT_S = 10.0
# The test thread waits a little longer than the call's own deadline: past it, the served loop itself
# was blocked (a deadline can only fire on a loop that runs).
BLOCKED_AFTER_S = CALL_TIMEOUT_S + 5.0
# After this many hangs in one RPC's campaign the rest of its examples are not sent: each costs
# CALL_TIMEOUT_S and one is enough to fail the test; the campaign stays bounded even when failing.
MAX_HANGS_PER_RPC = 2
QUIESCENCE_S = 20.0
TRANSIENT_STATES = ("CREATING", "UPDATING", "SCALING", "COMMITTING_TXN", "TRUNCATING", "SEALING")
# Driver, SQL and host text that must never reach a client (the database is up during the campaign).
_LEAK = re.compile(
    r"asyncpg|psycopg|SQLSTATE|sqlalchemy|invalid input for query argument|violates .* constraint|"
    r"insert or update on table|relation \"|syntax error at|postgres(ql)?://|Traceback|File \"/",
    re.IGNORECASE,
)

FIXED1, FIXED3, RATE, SEALED, TAGGED = "one", "three", "rate", "sealed", "tagged"
ACTIVE_STREAMS = (FIXED1, FIXED3, RATE, TAGGED)
RG, KVT, WRITER, TAG = "rg", "kv", "w1", "t1"
ZERO_ID = "00000000-0000-0000-0000-000000000000"
SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]


@dataclass(frozen=True)
class Violation:
    rpc: str
    category: str
    status: str
    detail: str
    request: Message

    def cause(self) -> tuple[str, str, str]:
        """Details with numbers and quoted values blanked: calls failing the same way group."""
        detail = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", self.detail)
        return self.category, self.status, re.sub(r"\d+", "#", detail)[:120]


def describe(msg: Message) -> str:
    """One line, long runs of one character folded (a 70,000-character name stays readable)."""
    text = text_format.MessageToString(msg, as_one_line=True)
    return re.sub(
        r"((?:\\\d{3})|[^\\])\1{15,}", lambda m: f"{m.group(1)}x{len(m.group(0)) // len(m.group(1))}", text
    )


def report(violations: list[Violation]) -> str:
    """Grouped by cause; for each cause and RPC the smallest request that showed it."""
    groups: dict[tuple[str, str, str], dict[str, Violation]] = {}
    for v in violations:
        per_rpc = groups.setdefault(v.cause(), {})
        best = per_rpc.get(v.rpc)
        if best is None or v.request.ByteSize() < best.request.ByteSize():
            per_rpc[v.rpc] = v
    lines = [f"{len(violations)} contract violations in {len(groups)} causes:"]
    for (category, status, detail), per_rpc in sorted(groups.items()):
        lines.append(f"- {category} {status}: {detail}")
        for rpc, v in sorted(per_rpc.items()):
            lines.append(f"    {rpc}({describe(v.request)})  -> {v.detail[:160]}")
    return "\n".join(lines)


@dataclass
class World:
    """What exists in this RPC's scope, refreshed as the campaign changes it."""

    scope: str
    segments: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    txns: list[tuple[str, int, int]] = field(default_factory=list)
    rg_id: str = ZERO_ID
    rg_generation: int = 0
    now_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def subscriber(self) -> str:
        return f"{self.scope}/{RG}"


class _Raw:
    """A request body sent as given, bypassing protobuf: grpclib's codec only calls these."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # protobuf's spelling: the codec calls it
        return self.data


class Campaign:
    """A served controller with workers on a private event loop thread, and the calls made to it."""

    def __init__(self, admin_url: str) -> None:
        self._admin_url = admin_url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fuzz-controller", daemon=True)
        self._thread.start()
        self._stack = AsyncExitStack()
        self._db = ""
        self.services: Services
        self.stub: ControllerServiceStub
        self.calls = 0
        self.calls_by_rpc: dict[str, int] = {}
        self.last_status: Status | None = None  # the gRPC status of the last call (OK when answered)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.run(self._start(), timeout=60)

    async def _start(self) -> None:
        self._db = await clone_database(self._admin_url)
        url = with_database(self._admin_url, self._db)
        self.services = await self._stack.enter_async_context(running_controller(url))
        self.stub = await self._stack.enter_async_context(
            served(self.services, grpc_extensions(self.services.controller))
        )

    def close(self) -> None:
        try:
            self.run(self._stack.aclose(), timeout=30)
            if self._db:
                self.run(drop_database(self._admin_url, self._db), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # --- one call ---------------------------------------------------------------------------

    def call(self, rpc: str, request: Message, violations: list[Violation]) -> Message | None:
        """Sends `request` to `rpc`; records a violation when the answer breaks the contract."""
        self.calls += 1
        self.calls_by_rpc[rpc] = self.calls_by_rpc.get(rpc, 0) + 1
        method: Callable[..., Awaitable[Message]] = getattr(self.stub, rpc)
        return self._judge(rpc, request, lambda: method(request, timeout=CALL_TIMEOUT_S), violations)

    def call_raw(self, rpc: str, body: bytes, violations: list[Violation]) -> Message | None:
        """Sends bytes that need not be protobuf as `rpc`'s request; the same judgement."""
        reply_type = getattr(pb, SERVICE.methods_by_name[rpc].output_type.name)

        async def send() -> Message:
            channel = self.stub.createScope.channel
            path = f"/{SERVICE_NAME}/{rpc}"
            async with channel.request(
                path, Cardinality.UNARY_UNARY, _Raw, reply_type, timeout=CALL_TIMEOUT_S
            ) as stream:
                await stream.send_message(_Raw(body), end=True)
                reply: Message | None = await stream.recv_message()
                assert reply is not None
                return reply

        return self._judge(rpc, pb.DelegationToken(delegationToken=body.hex()), send, violations)

    def call_framed(self, rpc: str, data: bytes, violations: list[Violation]) -> Message | None:
        """Sends `data` as the request's whole DATA payload, gRPC's 5-byte message prefix included
        (or left out, or lying): the framing itself is what is malformed."""
        reply_type = getattr(pb, SERVICE.methods_by_name[rpc].output_type.name)

        async def send() -> Message:
            channel = self.stub.createScope.channel
            path = f"/{SERVICE_NAME}/{rpc}"
            async with channel.request(
                path, Cardinality.UNARY_UNARY, _Raw, reply_type, timeout=CALL_TIMEOUT_S
            ) as stream:
                await stream.send_request()
                # grpclib's client always frames a message well; its HTTP/2 stream sends raw DATA.
                await stream._stream.send_data(data, end_stream=True)
                stream._send_message_done = stream._end_done = True
                reply: Message | None = await stream.recv_message()
                assert reply is not None
                return reply

        return self._judge(rpc, pb.DelegationToken(delegationToken=data.hex()), send, violations)

    def _judge(
        self,
        rpc: str,
        request: Message,
        send: Callable[[], Awaitable[Message]],
        violations: list[Violation],
    ) -> Message | None:
        def record(category: str, status: str, detail: str) -> None:
            violations.append(Violation(rpc, category, status, detail, request))

        async def guarded() -> Message:
            return await asyncio.wait_for(send(), CALL_TIMEOUT_S + 1)

        future = asyncio.run_coroutine_threadsafe(guarded(), self._loop)
        self.last_status = None
        try:
            reply = future.result(BLOCKED_AFTER_S)
            self.last_status = Status.OK
            return reply
        except GRPCError as exc:
            self.last_status = exc.status
            detail = str(exc.message or "")
            if exc.status in (Status.INTERNAL, Status.UNKNOWN):
                record("internal error", exc.status.name, detail)
            elif exc.status == Status.UNAVAILABLE:
                record("input reported as an outage", exc.status.name, detail)
            elif exc.status == Status.DEADLINE_EXCEEDED:
                record("hang", exc.status.name, f"no answer within {CALL_TIMEOUT_S} s")
            elif _LEAK.search(detail):
                record("internals in details", exc.status.name, detail)
            return None
        except TimeoutError:
            if future.done():
                record("hang", "TIMEOUT", f"no answer within {CALL_TIMEOUT_S} s")
            else:
                future.cancel()
                record("hang", "LOOP BLOCKED", f"the served event loop did not run for {BLOCKED_AFTER_S} s")
            return None
        except Exception as exc:  # a reset stream or connection: the server failed the call itself
            record("transport failure", type(exc).__name__, str(exc))
            return None

    # --- fixtures and the world --------------------------------------------------------------

    def prepare(self, scope: str) -> World:
        world = World(scope)
        self.run(self._prepare(world), timeout=60)
        return world

    async def _prepare(self, world: World) -> None:
        stub, scope = self.stub, world.scope
        await stub.createScope(pb.ScopeInfo(scope=scope))
        fixed = pb.ScalingPolicy.FIXED_NUM_SEGMENTS
        configs = {
            FIXED1: pb.ScalingPolicy(scaleType=fixed, minNumSegments=1),
            FIXED3: pb.ScalingPolicy(scaleType=fixed, minNumSegments=3),
            RATE: pb.ScalingPolicy(
                scaleType=pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
                targetRate=10,
                scaleFactor=2,
                minNumSegments=2,
            ),
            SEALED: pb.ScalingPolicy(scaleType=fixed, minNumSegments=2),
            TAGGED: pb.ScalingPolicy(scaleType=fixed, minNumSegments=2),
        }
        for name, policy in configs.items():
            config = pb.StreamConfig(streamInfo=pb.StreamInfo(scope=scope, stream=name), scalingPolicy=policy)
            if name == TAGGED:
                config.tags.tag.extend([TAG, "t2"])
                config.retentionPolicy.CopyFrom(
                    pb.RetentionPolicy(
                        retentionType=pb.RetentionPolicy.TIME, retentionParam=60_000, retentionMax=I64_MAX
                    )
                )
            created = await stub.createStream(config)
            assert created.status == pb.CreateStreamStatus.SUCCESS, (name, created)
        sealed = await stub.sealStream(pb.StreamInfo(scope=scope, stream=SEALED))
        assert sealed.status == pb.UpdateStreamStatus.SUCCESS
        for stream in (FIXED3, FIXED3, FIXED1):
            info = pb.StreamInfo(scope=scope, stream=stream)
            txn = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=30_000))
            world.txns.append((stream, txn.txnId.highBits, txn.txnId.lowBits))
        start = pb.StreamCut(streamInfo=pb.StreamInfo(scope=scope, stream=FIXED3))
        group = await stub.createReaderGroup(
            pb.ReaderGroupConfiguration(
                scope=scope,
                readerGroupName=RG,
                groupRefreshTimeMillis=3_000,
                automaticCheckpointIntervalMillis=30_000,
                maxOutstandingCheckpointRequest=3,
                retentionType=pb.ReaderGroupConfiguration.AUTOMATIC,
                readerGroupId=ZERO_ID,
                startingStreamCuts=[start],
            )
        )
        assert group.status == pb.CreateReaderGroupResponse.SUCCESS, group
        world.rg_id, world.rg_generation = group.config.readerGroupId, group.config.generation
        table = await stub.createKeyValueTable(
            pb.KeyValueTableConfig(scope=scope, kvtName=KVT, partitionCount=2, primaryKeyLength=4)
        )
        assert table.status == pb.CreateKeyValueTableStatus.SUCCESS, table
        await self._refresh(world)
        cut = {seg: 0 for seg, _, _ in world.segments[FIXED3]}
        await stub.noteTimestampFromWriter(
            pb.TimestampFromWriter(
                writer=WRITER,
                position=pb.StreamCut(streamInfo=pb.StreamInfo(scope=scope, stream=FIXED3), cut=cut),
                timestamp=world.now_ms,
            )
        )

    def refresh(self, world: World) -> None:
        self.run(self._refresh(world), timeout=BLOCKED_AFTER_S)

    async def _refresh(self, world: World) -> None:
        for stream in (*ACTIVE_STREAMS, SEALED):
            try:
                ranges = await self.stub.getCurrentSegments(pb.StreamInfo(scope=world.scope, stream=stream))
            except (GRPCError, TimeoutError):
                world.segments.pop(stream, None)
                continue
            world.segments[stream] = sorted(
                ((r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges.segmentRanges),
                key=lambda s: s[1],
            )

    def learn(self, rpc: str, reply: Message | None, world: World, request: Message) -> None:
        """Keeps the world current with what a successful call created or changed."""
        if isinstance(reply, pb.CreateTxnResponse) and isinstance(request, pb.CreateTxnRequest):
            world.txns.append((request.streamInfo.stream, reply.txnId.highBits, reply.txnId.lowBits))
        if (
            isinstance(reply, pb.UpdateReaderGroupResponse)
            and reply.status == pb.UpdateReaderGroupResponse.SUCCESS
        ):
            world.rg_generation = reply.generation

    # --- after a campaign ---------------------------------------------------------------------

    def stuck_streams(self, wait_s: float = QUIESCENCE_S, known: frozenset[str] = frozenset()) -> list[str]:
        """Waits (at most `wait_s`) for the workers to drain; the streams still in a transient state,
        each as "scope/name STATE; pending: <its requests>". Streams in `known` ("scope/name", stuck
        before) and their requests are not waited for."""
        return self.run(self._settle(wait_s, known), timeout=wait_s + 30)

    async def _settle(self, wait_s: float, known: frozenset[str]) -> list[str]:
        deadline = time.monotonic() + wait_s
        while True:
            rows = [
                r
                for r in await self.services.pool.fetch(
                    "SELECT s.scope, s.name, t.state FROM streams s"
                    " JOIN stream_states t ON t.stream_id = s.id"
                    " WHERE t.state = ANY($1::text[]) ORDER BY 1, 2",
                    list(TRANSIENT_STATES),
                )
                if f"{r['scope']}/{r['name']}" not in known
            ]
            pending = [
                p
                for p in await self.services.pool.fetch(
                    # A parked request is an end state (its error is kept for operators), not work left.
                    "SELECT scope, stream, kind, attempts, last_error FROM requests"
                    " WHERE parked_at IS NULL ORDER BY id"
                )
                if f"{p['scope']}/{p['stream']}" not in known
            ]
            if (not rows and not pending) or time.monotonic() > deadline:
                return [
                    f"{r['scope']}/{r['name']} {r['state']}; pending: "
                    + "; ".join(
                        f"{p['kind']} attempts={p['attempts']} error={(p['last_error'] or '')[:100]!r}"
                        for p in pending
                        if (p["scope"], p["stream"]) == (r["scope"], r["name"])
                    )
                    for r in rows
                ]
            await asyncio.sleep(0.1)

    def healthy(self) -> str | None:
        """None when the server answers promptly, else what failed."""

        async def probe() -> None:
            await self.stub.getControllerServerList(pb.ServerRequest(), timeout=5)
            await self.stub.listScopes(pb.ScopesRequest(), timeout=5)

        try:
            self.run(probe(), timeout=10)
        except Exception as exc:  # any failure is the finding
            return f"health check failed: {exc!r}"
        return None


# --- biased strategies -----------------------------------------------------------------------


def mostly(
    known: st.SearchStrategy[Any], generic: st.SearchStrategy[Any], share: int = 7
) -> st.SearchStrategy[Any]:
    """`known` about share/10 of the time, else the generic walk."""
    return st.integers(0, 9).flatmap(lambda i: known if i < share else generic)


OFFSETS = st.sampled_from((0, 0, 0, 1, 10, 100, -1, I64_MAX))
# Draws that read the world (which the campaign changes) keep one shape whatever it holds: an index
# taken modulo the current list, a fixed number of offsets. Hypothesis replays choice sequences and
# refuses a strategy whose draws change shape between runs.
ANY_INDEX = st.integers(0, 2**16)
CUT_WIDTH = 48


def pick(items: Callable[[], list[T]], fallback: T) -> st.SearchStrategy[T]:
    """One of the list `items()` returns at draw time (`fallback` when it is empty)."""

    def choose(i: int) -> T:
        current = items()
        return current[i % len(current)] if current else fallback

    return ANY_INDEX.map(choose)


def hints_for(world: World) -> Hints:
    """Biases toward the world's scope, streams, segments, transactions, group, table and writer,
    so a good share of calls reach deep paths; the generic walk keeps the rest."""
    now = st.integers(world.now_ms - 60_000, world.now_ms + 60_000)
    times = st.one_of(now, st.sampled_from(INT64_EDGES))
    streams = (*ACTIVE_STREAMS, SEALED)
    rg_generation = st.builds(lambda: world.rg_generation)
    fresh_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,11}", fullmatch=True)

    def stream_info() -> st.SearchStrategy[pb.StreamInfo]:
        return st.sampled_from(streams).map(lambda s: pb.StreamInfo(scope=world.scope, stream=s))

    @st.composite
    def cut(draw: st.DrawFn, stream: str | None = None) -> pb.StreamCut:
        name = stream or draw(st.sampled_from(streams))
        whole = draw(st.booleans())
        included = draw(st.lists(st.booleans(), min_size=CUT_WIDTH, max_size=CUT_WIDTH))
        offsets = draw(st.lists(OFFSETS, min_size=CUT_WIDTH, max_size=CUT_WIDTH))
        segments = world.segments.get(name, [])[:CUT_WIDTH]
        chosen = zip(segments, included[: len(segments)], offsets[: len(segments)], strict=True)
        cut = {seg: offset for (seg, _, _), inc, offset in chosen if whole or inc}
        return pb.StreamCut(streamInfo=pb.StreamInfo(scope=world.scope, stream=name), cut=cut)

    @st.composite
    def scale(draw: st.DrawFn) -> pb.ScaleRequest:
        name = draw(st.sampled_from(ACTIVE_STREAMS))
        segments = world.segments.get(name) or [(0, 0.0, 1.0)]
        first = draw(ANY_INDEX) % len(segments)
        last = min(first + draw(st.integers(0, 1)), len(segments) - 1)
        low, high = segments[first][1], segments[last][2]
        pieces = draw(st.integers(1, 3))
        points = [low + (high - low) * i / pieces for i in range(pieces)] + [high]
        ranges = [pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in itertools.pairwise(points)]
        return pb.ScaleRequest(
            streamInfo=pb.StreamInfo(scope=world.scope, stream=name),
            sealedSegments=[s[0] for s in segments[first : last + 1]],
            newKeyRanges=ranges,
            scaleTimestamp=draw(times),
        )

    def txn_request(cls: type[Any], **extra: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        @st.composite
        def build(draw: st.DrawFn) -> Any:
            stream, high, low = draw(pick(lambda: world.txns, (FIXED1, 0, 0)))
            values = {k: draw(v) for k, v in extra.items()}
            return cls(
                streamInfo=pb.StreamInfo(scope=world.scope, stream=stream),
                txnId=pb.TxnId(highBits=high, lowBits=low),
                **values,
            )

        return build()

    leases = st.one_of(st.integers(10, 30_000), st.sampled_from(INT64_EDGES))
    user_names = st.one_of(st.just(RG), st.just(KVT), fresh_names)
    counts = st.sampled_from((1, 2, 3, 5, 1, 2, 3, 0, -1, 10_000, 10_001, 100_000, 2**31 - 1))
    # Valid values repeated so most plausible messages pass validation and do the work; the edges
    # stay in every list.
    scaling_policy = st.builds(
        pb.ScalingPolicy,
        scaleType=st.sampled_from((0, 1, 2)),
        targetRate=st.sampled_from((1, 10, 100, 10, 0, -1, 2**31 - 1)),
        scaleFactor=st.sampled_from((2, 3, 2, 3, 0, -1, 2**31 - 1)),
        minNumSegments=counts,
    )
    retention_policy = st.builds(
        pb.RetentionPolicy,
        retentionType=st.sampled_from((1, 2, 0, 3)),
        retentionParam=st.sampled_from((0, 1_000, 60_000, -1, I64_MAX)),
        retentionMax=st.sampled_from((0, 1_000, 120_000, -1, I64_MAX)),
    )
    stream_config = st.builds(
        pb.StreamConfig,
        streamInfo=st.one_of(
            stream_info(), fresh_names.map(lambda n: pb.StreamInfo(scope=world.scope, stream=n))
        ),
        scalingPolicy=scaling_policy,
        retentionPolicy=st.sampled_from((pb.RetentionPolicy(),) * 2) | retention_policy,
        tags=st.lists(st.sampled_from((TAG, "t2", TAG, "", "a" * 256)), max_size=2).map(
            lambda t: pb.Tags(tag=t)
        ),
        timestampAggregationTimeout=st.sampled_from((0, 0, 1_000, 1_000, -1, I64_MAX)),
        rolloverSizeBytes=st.sampled_from((0, 0, 1024, 1024, -1, I64_MAX)),
    )
    rg_config = st.builds(
        pb.ReaderGroupConfiguration,
        scope=st.just(world.scope),
        readerGroupName=user_names,
        groupRefreshTimeMillis=st.sampled_from((0, 3_000, -1, I64_MAX)),
        automaticCheckpointIntervalMillis=st.sampled_from((0, 30_000, -1, I64_MAX)),
        maxOutstandingCheckpointRequest=st.sampled_from((1, 3, 0, -1)),
        retentionType=st.sampled_from((0, 1, 2, 3)),
        generation=st.one_of(rg_generation, st.sampled_from(INT64_EDGES)),
        readerGroupId=st.one_of(st.builds(lambda: world.rg_id), st.sampled_from((ZERO_ID, "not-a-uuid", ""))),
        startingStreamCuts=st.lists(cut(), min_size=1, max_size=2),
        endingStreamCuts=st.lists(cut(), max_size=1),
    )
    kvt_config = st.builds(
        pb.KeyValueTableConfig,
        scope=st.just(world.scope),
        kvtName=user_names,
        partitionCount=counts,
        primaryKeyLength=st.sampled_from((1, 4, 16, 0, -1, 2**31 - 1)),
        secondaryKeyLength=st.sampled_from((0, 4, -1, 2**31 - 1)),
        rolloverSizeBytes=st.sampled_from((0, 1024, -1, I64_MAX)),
    )
    subscriber_cut = st.builds(
        pb.SubscriberStreamCut,
        subscriber=st.just(world.subscriber),
        generation=st.one_of(rg_generation, st.sampled_from(INT64_EDGES)),
        readerGroupId=st.builds(lambda: world.rg_id),
        streamCut=cut(FIXED3),
    )
    writer_mark = st.builds(
        pb.TimestampFromWriter, writer=st.sampled_from((WRITER, "w2")), position=cut(), timestamp=times
    )
    segment_ids = pick(lambda: [s[0] for v in world.segments.values() for s in v], 0)
    range_cuts = cut(FIXED3).map(lambda c: dict(c.cut))
    return Hints(
        messages={
            "StreamInfo": lambda g: mostly(stream_info(), g),
            "StreamConfig": lambda g: mostly(stream_config, g),
            "StreamCut": lambda g: mostly(cut(), g),
            "ScaleRequest": lambda g: mostly(scale(), g),
            "TxnRequest": lambda g: mostly(
                txn_request(pb.TxnRequest, writerId=st.just(WRITER), timestamp=times), g
            ),
            "PingTxnRequest": lambda g: mostly(txn_request(pb.PingTxnRequest, lease=leases), g),
            "ReaderGroupConfiguration": lambda g: mostly(rg_config, g),
            "KeyValueTableConfig": lambda g: mostly(kvt_config, g),
            "SubscriberStreamCut": lambda g: mostly(subscriber_cut, g),
            "TimestampFromWriter": lambda g: mostly(writer_mark, g),
        },
        fields={
            "scope": lambda g: mostly(st.just(world.scope), g),
            "stream": lambda g: mostly(st.sampled_from(streams), g),
            "kvtName": lambda g: mostly(st.just(KVT), g),
            "readerGroup": lambda g: mostly(st.just(RG), g),
            "readerGroupName": lambda g: mostly(st.just(RG), g),
            "readerGroupId": lambda g: mostly(st.builds(lambda: world.rg_id), g),
            "writer": lambda g: mostly(st.just(WRITER), g),
            "subscriber": lambda g: mostly(st.just(world.subscriber), g),
            "tag": lambda g: mostly(st.just(TAG), g),
            "Tags.tag": lambda g: st.one_of(
                g, st.lists(VALID_NAMES, max_size=3), st.lists(VALID_NAMES, min_size=127, max_size=130)
            ),
            "generation": lambda g: mostly(rg_generation, g),
            "lease": lambda g: mostly(leases, g),
            "epoch": lambda g: mostly(st.integers(0, 3), g),
            "segmentId": lambda g: mostly(segment_ids, g),
            "timestamp": lambda g: mostly(times, g),
            "StreamCutRange.from": lambda g: mostly(range_cuts, g),
            "StreamCutRange.to": lambda g: mostly(range_cuts, g),
        },
    )


def strategy_for(rpc: str, world: World) -> st.SearchStrategy[Message]:
    return ProtoStrategies(hints_for(world)).message(SERVICE.methods_by_name[rpc].input_type)
