"""WireSegmentStore against scripted segment stores on loopback: what each reply becomes (success,
a retryable StoreUnavailable, a final domain error), and how connections are pooled and dropped."""

from __future__ import annotations

import asyncio
import inspect
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from app.api.errors import message_for
from app.domain.errors import (
    FinalFailure,
    IllegalState,
    InvalidInput,
    NotEmpty,
    NotFound,
    StoreUnavailable,
)
from app.domain.hosts import HostAddress
from app.domain.ids import transaction_segment_name
from app.domain.records import ScaleType
from app.ports import SegmentInfo, SegmentStore
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.wire import commands as wc
from tests.segmentstore.scripted import DROP, STALL, Answer, FixedLocator, ScriptedServer, scripted

SEG = "sc/st/0.#epoch.0"
TABLE = "sc/kvt_kvtable/0.#epoch.0"


def rid(command: wc.Command) -> int:
    value = getattr(command, "request_id", None)
    assert isinstance(value, int)
    return value


def seg(command: wc.Command) -> str:
    if isinstance(command, wc.AppendBlockEnd):
        return SEG  # the append session's segment
    segments = wc.segments_named(command)
    if segments:
        return segments[0]
    raise AssertionError(command)


def ok(command: wc.Command, length: int = 100, sealed: bool = False) -> wc.Command:
    """The plain success reply to each command the controller sends."""
    r = rid(command)
    match command:
        case wc.CreateSegment() | wc.CreateTableSegment():
            return wc.SegmentCreated(r, seg(command))
        case wc.SealSegment():
            return wc.SegmentSealed(r, seg(command))
        case wc.DeleteSegment() | wc.DeleteTableSegment():
            return wc.SegmentDeleted(r, seg(command))
        case wc.TruncateSegment():
            return wc.SegmentTruncated(r, seg(command))
        case wc.UpdateSegmentPolicy():
            return wc.SegmentPolicyUpdated(r, seg(command))
        case wc.GetStreamSegmentInfo():
            return wc.StreamSegmentInfo(r, command.segment_name, True, sealed, False, 0, length, 0)
        case wc.MergeSegmentsBatch():
            offsets = tuple(length + i for i in range(len(command.sources)))
            return wc.SegmentsBatchMerged(r, command.target, command.sources, offsets)
        case wc.SetupAppend():
            return wc.AppendSetup(r, command.segment, command.writer_id, wc.NULL_ATTRIBUTE_VALUE)
        case wc.AppendBlockEnd():
            return wc.DataAppended(command.writer_id, command.last_event_number, -1, r, length)
    raise AssertionError(f"no plain reply for {command}")


def answering(**special: Callable[[wc.Command], Answer]) -> Callable[[wc.Command], Answer]:
    """A script: `special[type name](command)` where given, else the plain success."""

    def script(command: wc.Command) -> Answer:
        handler = special.get(type(command).__name__)
        return handler(command) if handler else ok(command)

    return script


@pytest.fixture
async def make_store() -> AsyncIterator[Callable[..., WireSegmentStore]]:
    stores: list[WireSegmentStore] = []

    def make(*endpoints: HostAddress, **kwargs: Any) -> WireSegmentStore:
        store = WireSegmentStore(FixedLocator(*endpoints), **kwargs)
        stores.append(store)
        return store

    yield make
    for store in stores:
        await store.close()


def test_the_wire_store_has_every_call_of_the_port_with_its_signature() -> None:
    port_calls = {n for n in vars(SegmentStore) if not n.startswith("_")}
    assert port_calls
    for name in port_calls:
        assert inspect.signature(getattr(WireSegmentStore, name)) == inspect.signature(
            getattr(SegmentStore, name)
        ), name


# --- what the controller sends ------------------------------------------------------------------


async def test_commands_carry_names_policies_and_the_token(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    async with scripted(answering()) as server:
        store = make_store(server.endpoint, token=lambda: "jwt")
        await store.create_segment(SEG, ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 7, 1024)
        await store.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 7, 0)
        await store.update_policy(SEG, ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 9)
        await store.create_transaction_segment(SEG, -1, 42, 512)
        await store.create_table_segment(TABLE, 24, 0)
        await store.delete_table_segment(TABLE, True)
        await store.abort_transaction_segment(SEG, -1, 42)
        await store.truncate_segment(SEG, 40)

    txn = SEG + "#transaction.ffffffffffffffff000000000000002a"
    got = server.requests()
    ids = [rid(c) for c in got]
    assert got == [
        wc.CreateSegment(ids[0], SEG, 7, 2, "jwt", 1024),
        # A fixed policy travels as Pravega's controller sends it: no scaling, rate 0.
        wc.CreateSegment(ids[1], SEG, 0, 0, "jwt", 0),
        wc.UpdateSegmentPolicy(ids[2], SEG, 9, 1, "jwt"),
        wc.CreateSegment(ids[3], txn, 0, 0, "jwt", 512),
        wc.CreateTableSegment(ids[4], TABLE, "jwt", False, 24, 0),
        wc.DeleteTableSegment(ids[5], TABLE, True, "jwt"),
        wc.DeleteSegment(ids[6], txn, "jwt"),
        wc.TruncateSegment(ids[7], SEG, 40, "jwt"),
    ]
    assert len(set(ids)) == len(ids)
    assert server.connections == 1, "sequential requests share one pooled connection"


async def test_seal_then_asks_for_the_final_length(make_store: Callable[..., WireSegmentStore]) -> None:
    async with scripted(answering(GetStreamSegmentInfo=lambda c: ok(c, length=123, sealed=True))) as server:
        store = make_store(server.endpoint)
        assert await store.seal_segment(SEG) == 123
        assert await store.get_segment_info(SEG) == SegmentInfo(SEG, 123, 0, True)
    assert [type(c) for c in server.requests()] == [
        wc.SealSegment,
        wc.GetStreamSegmentInfo,
        wc.GetStreamSegmentInfo,
    ]


async def test_merges_send_one_batch_and_return_the_target_length(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    parent = "sc/st/0.#epoch.1"
    async with scripted(answering()) as server:
        store = make_store(server.endpoint)
        assert await store.merge_transaction_segments(SEG, [(1, 2), (1, 3)], txn_parent=parent) == 101
        assert await store.merge_transaction_segment(SEG, 1, 4) == 100
    batch, single = server.requests()
    assert isinstance(batch, wc.MergeSegmentsBatch) and isinstance(single, wc.MergeSegmentsBatch)
    assert batch.target == SEG
    assert batch.sources == (transaction_segment_name(parent, 1, 2), transaction_segment_name(parent, 1, 3))
    assert single.sources == (transaction_segment_name(SEG, 1, 4),)


async def test_a_merge_reported_without_offsets_asks_for_the_length(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    def merged_already(c: wc.Command) -> Answer:
        assert isinstance(c, wc.MergeSegmentsBatch)
        return wc.SegmentsBatchMerged(rid(c), c.target, c.sources, (-1,))

    async with scripted(
        answering(MergeSegmentsBatch=merged_already, GetStreamSegmentInfo=lambda c: ok(c, length=77))
    ) as server:
        assert await make_store(server.endpoint).merge_transaction_segment(SEG, 1, 2) == 77


# --- classification -----------------------------------------------------------------------------

Call = Callable[[WireSegmentStore], Awaitable[object]]

CALLS: dict[str, Call] = {
    "create": lambda s: s.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0),
    "seal": lambda s: s.seal_segment(SEG),
    "truncate": lambda s: s.truncate_segment(SEG, 10),
    "delete": lambda s: s.delete_segment(SEG),
    "policy": lambda s: s.update_policy(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0),
    "info": lambda s: s.get_segment_info(SEG),
    "create_txn": lambda s: s.create_transaction_segment(SEG, 1, 2, 0),
    "merge": lambda s: s.merge_transaction_segment(SEG, 1, 2),
    "abort": lambda s: s.abort_transaction_segment(SEG, 1, 2),
    "create_table": lambda s: s.create_table_segment(TABLE, 16, 0),
    "delete_table": lambda s: s.delete_table_segment(TABLE, True),
}
COMMAND_OF = {
    "create": "CreateSegment",
    "seal": "SealSegment",
    "truncate": "TruncateSegment",
    "delete": "DeleteSegment",
    "policy": "UpdateSegmentPolicy",
    "info": "GetStreamSegmentInfo",
    "create_txn": "CreateSegment",
    "merge": "MergeSegmentsBatch",
    "abort": "DeleteSegment",
    "create_table": "CreateTableSegment",
    "delete_table": "DeleteTableSegment",
}


def reply_of(kind: str) -> Callable[[wc.Command], wc.Command]:
    factories: dict[str, Callable[[wc.Command], wc.Command]] = {
        "NoSuchSegment": lambda c: wc.NoSuchSegment(rid(c), seg(c), "", -1),
        "SegmentIsSealed": lambda c: wc.SegmentIsSealed(rid(c), seg(c), "", -1),
        "SegmentAlreadyExists": lambda c: wc.SegmentAlreadyExists(rid(c), seg(c), ""),
        "SegmentIsTruncated": lambda c: wc.SegmentIsTruncated(rid(c), seg(c), 40, "", 10),
        "TableSegmentNotEmpty": lambda c: wc.TableSegmentNotEmpty(rid(c), seg(c), ""),
        "AuthTokenCheckFailed": lambda c: wc.AuthTokenCheckFailed(rid(c), "", 0),
        "IllegalArgument": lambda c: wc.ErrorMessage(rid(c), seg(c), "not a table segment", 0),
        "UnspecifiedError": lambda c: wc.ErrorMessage(rid(c), seg(c), "boom", -1),
        "OperationUnsupported": lambda c: wc.OperationUnsupported(rid(c), "createSegment", ""),
        "TableRead": lambda c: wc.TableRead(rid(c), seg(c), ()),
    }
    return factories[kind]


# (call, reply) -> outcome: None for success, else the exception type.
OUTCOMES: list[tuple[str, str, type[Exception] | None]] = [
    # Pravega's idempotent successes: a retried step finds its work done.
    ("create", "SegmentAlreadyExists", None),
    ("create_txn", "SegmentAlreadyExists", None),
    ("create_table", "SegmentAlreadyExists", None),
    ("seal", "SegmentIsSealed", None),
    ("delete", "NoSuchSegment", None),
    ("abort", "NoSuchSegment", None),
    ("delete_table", "NoSuchSegment", None),
    ("truncate", "SegmentIsTruncated", None),  # below the start (the info says length 100)
    # The stand-in's final errors for the same cases.
    ("seal", "NoSuchSegment", NotFound),
    ("info", "NoSuchSegment", NotFound),
    ("truncate", "NoSuchSegment", NotFound),
    ("policy", "NoSuchSegment", NotFound),
    ("merge", "NoSuchSegment", NotFound),
    ("merge", "SegmentIsSealed", IllegalState),
    ("merge", "SegmentIsTruncated", InvalidInput),
    ("delete_table", "TableSegmentNotEmpty", NotEmpty),
    ("delete_table", "IllegalArgument", InvalidInput),
    # Retryable.
    ("policy", "AuthTokenCheckFailed", StoreUnavailable),
    ("create", "AuthTokenCheckFailed", StoreUnavailable),
    # Final: nothing re-running the step can fix.
    ("create", "OperationUnsupported", FinalFailure),
    ("create", "UnspecifiedError", FinalFailure),
    ("create", "TableRead", FinalFailure),
    ("seal", "TableRead", FinalFailure),
]


@pytest.mark.parametrize(("call", "reply", "outcome"), OUTCOMES, ids=[f"{c}-{r}" for c, r, _ in OUTCOMES])
async def test_reply_classification(
    make_store: Callable[..., WireSegmentStore], call: str, reply: str, outcome: type[Exception] | None
) -> None:
    command = COMMAND_OF[call]
    async with scripted(answering(**{command: reply_of(reply)})) as server:
        store = make_store(server.endpoint)
        if outcome is None:
            await CALLS[call](store)
        else:
            with pytest.raises(outcome) as raised:
                await CALLS[call](store)
            if outcome is FinalFailure:
                assert command in str(raised.value) and reply.replace("Unspecified", "") in str(raised.value)
        # A refusal is a whole exchange: the connection stays good for the next request.
        await store.delete_segment(SEG)
    assert server.connections == 1


async def test_truncation_past_the_end_is_invalid_input(make_store: Callable[..., WireSegmentStore]) -> None:
    def past_end(c: wc.Command) -> Answer:
        return wc.SegmentIsTruncated(rid(c), seg(c), 0, "", 101)

    async with scripted(
        answering(TruncateSegment=past_end, GetStreamSegmentInfo=lambda c: ok(c, length=100))
    ) as server:
        store = make_store(server.endpoint)
        with pytest.raises(InvalidInput, match="length is 100"):
            await store.truncate_segment(SEG, 101)
        await store.truncate_segment(SEG, 100)  # the same reply for an offset within: done already


async def test_info_of_a_segment_reported_missing_is_not_found(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    def missing(c: wc.Command) -> Answer:
        return wc.StreamSegmentInfo(rid(c), seg(c), False, False, False, 0, 0, 0)

    async with scripted(answering(GetStreamSegmentInfo=missing)) as server:
        with pytest.raises(NotFound):
            await make_store(server.endpoint).get_segment_info(SEG)


# --- connections --------------------------------------------------------------------------------


async def test_connection_refused_is_retryable(make_store: Callable[..., WireSegmentStore]) -> None:
    server = await ScriptedServer(answering()).start()
    await server.close()  # the port is free again: nothing listens
    with pytest.raises(StoreUnavailable, match="cannot connect") as refused:
        await make_store(server.endpoint).create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    # The address is for the operator's log (a note), never in what a caller is sent.
    port = str(server.endpoint.port)
    sent = message_for(refused.value)
    assert port not in sent and "127.0.0.1" not in sent, sent
    assert any(port in note for note in refused.value.__notes__), refused.value.__notes__


async def test_a_timeout_names_no_address_to_the_caller(make_store: Callable[..., WireSegmentStore]) -> None:
    async with scripted(answering(), hello=STALL) as server:
        with pytest.raises(StoreUnavailable) as timed_out:
            await make_store(server.endpoint, request_timeout_s=0.2).delete_segment(SEG)
    sent = message_for(timed_out.value)
    assert str(server.endpoint.port) not in sent and "127.0.0.1" not in sent, sent


async def test_an_incompatible_hello_is_retryable(make_store: Callable[..., WireSegmentStore]) -> None:
    async with scripted(answering(), hello=wc.Hello(20, 16)) as server:
        with pytest.raises(StoreUnavailable, match="Hello"):
            await make_store(server.endpoint).delete_segment(SEG)


async def test_a_silent_hello_times_out(make_store: Callable[..., WireSegmentStore]) -> None:
    async with scripted(answering(), hello=STALL) as server:
        with pytest.raises(StoreUnavailable, match="no connection and Hello within"):
            await make_store(server.endpoint, request_timeout_s=0.2).delete_segment(SEG)


async def test_a_malformed_reply_is_retryable_and_drops_the_connection(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    garbage = [struct.pack(">ii", 99, 0)]  # a frame of an unknown type

    def garbage_once(c: wc.Command) -> Answer:
        return garbage.pop() if garbage else ok(c)

    async with scripted(answering(DeleteSegment=garbage_once)) as server:
        store = make_store(server.endpoint)
        with pytest.raises(StoreUnavailable, match="malformed reply to DeleteSegment"):
            await store.delete_segment(SEG)
        await store.delete_segment(SEG)
        assert [r.connection for r in server.received] == [1, 2]


async def test_each_segment_goes_to_the_host_the_locator_names_for_it() -> None:
    async with scripted(answering()) as server:
        locator = FixedLocator(server.endpoint)
        store = WireSegmentStore(locator)
        try:
            await store.create_transaction_segments([SEG, "sc/st/1.#epoch.0"], 1, 2, 0)
            await store.merge_transaction_segment(SEG, 1, 2, txn_parent="sc/st/0.#epoch.1")
            await store.create_table_segment(TABLE, 8, 0)
            await store.append(SEG, 8)
        finally:
            await store.close()
    assert sorted(locator.calls[:2]) == sorted(
        [transaction_segment_name(SEG, 1, 2), transaction_segment_name("sc/st/1.#epoch.0", 1, 2)]
    )
    # A merge is asked of the target's host (a transaction shares its parent's container).
    assert locator.calls[2:] == [SEG, TABLE, SEG]


async def test_a_closed_store_refuses_requests_and_closes_its_connections(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    async with scripted(answering()) as server:
        store = make_store(server.endpoint)
        await store.delete_segment(SEG)
        assert store.pool.idle_count(server.endpoint) == 1
        assert not server.ended.is_set()
        await store.close()
        assert store.pool.idle_count(server.endpoint) == 0
        await asyncio.wait_for(server.ended.wait(), 5)
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.delete_segment(SEG)


async def test_a_dropped_request_is_retryable_and_its_connection_is_not_reused(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    drops = [True]

    def drop_once(c: wc.Command) -> Answer:
        return DROP if drops and drops.pop() else ok(c)

    async with scripted(answering(DeleteSegment=drop_once)) as server:
        store = make_store(server.endpoint)
        with pytest.raises(StoreUnavailable, match="connection lost during DeleteSegment"):
            await store.delete_segment(SEG)
        assert store.pool.idle_count(server.endpoint) == 0
        await store.delete_segment(SEG)
        assert server.connections == 2


async def test_a_pooled_connection_closed_by_the_peer_costs_one_retry(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    seen: list[int] = []

    def drop_on_reuse(c: wc.Command) -> Answer:
        seen.append(rid(c))
        return DROP if len(seen) == 2 else ok(c)

    async with scripted(answering(DeleteSegment=drop_on_reuse)) as server:
        store = make_store(server.endpoint)
        await store.delete_segment(SEG)  # connection 1, back to the pool
        await store.delete_segment(SEG)  # connection 1 drops it; retried on connection 2
        assert [r.connection for r in server.received] == [1, 1, 2]
        assert store.pool.idle_count(server.endpoint) == 1


async def test_a_dropping_server_is_retryable(make_store: Callable[..., WireSegmentStore]) -> None:
    async with scripted(lambda c: DROP) as server:
        store = make_store(server.endpoint)
        for _ in range(2):
            with pytest.raises(StoreUnavailable):
                await store.delete_segment(SEG)
        assert store.pool.idle_count(server.endpoint) == 0
        assert server.connections == 2


async def test_a_stalled_request_times_out_and_its_connection_is_dropped(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    stalls = [True]

    def stall_once(c: wc.Command) -> Answer:
        return STALL if stalls and stalls.pop() else ok(c)

    async with scripted(answering(SealSegment=stall_once)) as server:
        store = make_store(server.endpoint, request_timeout_s=0.2)
        with pytest.raises(StoreUnavailable, match=r"no reply to SealSegment within 0\.2 s"):
            await store.seal_segment(SEG)
        assert store.pool.idle_count(server.endpoint) == 0
        assert await store.seal_segment(SEG) == 100
        assert [r.connection for r in server.received] == [1, 2, 2]


async def test_a_reply_for_another_request_id_drops_the_connection(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    wrong = [True]

    def wrong_id_once(c: wc.Command) -> Answer:
        return wc.SegmentDeleted(rid(c) + 1000, seg(c)) if wrong and wrong.pop() else ok(c)

    async with scripted(answering(DeleteSegment=wrong_id_once)) as server:
        store = make_store(server.endpoint)
        with pytest.raises(StoreUnavailable, match="for request"):
            await store.delete_segment(SEG)
        assert store.pool.idle_count(server.endpoint) == 0
        await store.delete_segment(SEG)
        assert [r.connection for r in server.received] == [1, 2]


async def test_a_cancelled_request_drops_its_connection(make_store: Callable[..., WireSegmentStore]) -> None:
    stalls = [True]
    arrived = asyncio.Event()

    def stall_once(c: wc.Command) -> Answer:
        arrived.set()
        return STALL if stalls and stalls.pop() else ok(c)

    async with scripted(answering(DeleteSegment=stall_once)) as server:
        store = make_store(server.endpoint)
        task = asyncio.create_task(store.delete_segment(SEG))
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.pool.idle_count(server.endpoint) == 0
        await store.delete_segment(SEG)
        assert [r.connection for r in server.received] == [1, 2]


async def test_wrong_host_asks_the_locator_again(make_store: Callable[..., WireSegmentStore]) -> None:
    def wrong_host(c: wc.Command) -> Answer:
        return wc.WrongHost(rid(c), seg(c), "elsewhere:12345", "")

    async with scripted(wrong_host) as stale, scripted(answering()) as owner:
        store = make_store(stale.endpoint, owner.endpoint)
        await store.create_segment(SEG, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
        assert len(stale.received) == 1 and len(owner.received) == 1
        assert store.pool.idle_count(stale.endpoint) == 1, "a WrongHost answer is a whole exchange"


async def test_wrong_host_for_good_is_retryable(make_store: Callable[..., WireSegmentStore]) -> None:
    def wrong_host(c: wc.Command) -> Answer:
        return wc.WrongHost(rid(c), seg(c), "elsewhere:12345", "")

    async with scripted(wrong_host) as stale:
        store = make_store(stale.endpoint)
        with pytest.raises(StoreUnavailable, match="disowned"):
            await store.seal_segment(SEG)
        assert len(stale.received) == 4


async def test_concurrent_requests_use_distinct_ids_and_a_bounded_number_of_connections(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    names = [f"sc/st/{n}.#epoch.0" for n in range(40)]
    async with scripted(answering()) as server:
        store = make_store(server.endpoint, max_connections_per_host=3)
        await asyncio.gather(
            store.create_segments(names, ScaleType.FIXED_NUM_SEGMENTS, 0, 0),
            store.create_transaction_segments(names, 5, 6, 0),
            *(store.delete_segment(f"other/{n}") for n in range(10)),
        )
    ids = [rid(c) for c in server.requests()]
    assert len(ids) == 2 * len(names) + 10
    assert len(set(ids)) == len(ids), "request ids are unique"
    # Every reply matched its request (else StoreUnavailable above): one request per connection at
    # a time; and never more connections than the bound.
    assert server.connections <= 3
    created = {seg(c) for c in server.requests(wc.CreateSegment)}
    assert created >= set(names)


async def test_a_batch_sends_a_few_segments_at_once(make_store: Callable[..., WireSegmentStore]) -> None:
    names = [f"sc/st/{n}.#epoch.0" for n in range(20)]
    async with scripted(answering()) as server:
        await make_store(server.endpoint).create_segments(names, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    # Four in flight from the start (one connection each), below the pool's bound of 8.
    assert server.connections == 4
    assert sorted(seg(c) for c in server.requests()) == sorted(names)


async def test_a_batch_create_stops_starting_segments_after_a_failure(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    names = [f"sc/st/{n}.#epoch.0" for n in range(40)]

    def refuse_first(c: wc.Command) -> Answer:
        return wc.OperationUnsupported(rid(c), "createSegment", "") if seg(c) == names[0] else ok(c)

    async with scripted(answering(CreateSegment=refuse_first)) as server:
        store = make_store(server.endpoint)
        with pytest.raises(FinalFailure):
            await store.create_segments(names, ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    assert len(server.requests()) < len(names)


# --- append -------------------------------------------------------------------------------------


async def test_append_writes_one_framed_event_as_a_new_writer(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    async with scripted(answering(AppendBlockEnd=lambda c: ok(c, length=30 + 12))) as server:
        store = make_store(server.endpoint)
        assert await store.append(SEG, 12) == 42
        assert await store.append(SEG, 12) == 42
    setup, block, setup2, _ = server.requests()
    assert isinstance(setup, wc.SetupAppend) and isinstance(block, wc.AppendBlockEnd)
    assert isinstance(setup2, wc.SetupAppend)
    assert setup.segment == SEG
    assert block.writer_id == setup.writer_id != setup2.writer_id, "a fresh writer id per append"
    assert block.data == struct.pack(">ii", 0, 4) + bytes(4)
    assert (block.size_of_whole_events, block.num_event, block.last_event_number) == (12, 1, 1)
    assert rid(block) != rid(setup)
    # An append session is a connection of its own, closed afterwards.
    assert [r.connection for r in server.received] == [1, 1, 2, 2]
    assert store.pool.idle_count(server.endpoint) == 0


async def test_append_continues_a_known_writer_and_refuses_an_empty_append(
    make_store: Callable[..., WireSegmentStore],
) -> None:
    def known(c: wc.Command) -> Answer:
        assert isinstance(c, wc.SetupAppend)
        return wc.AppendSetup(rid(c), c.segment, c.writer_id, 6)

    async with scripted(answering(SetupAppend=known)) as server:
        store = make_store(server.endpoint)
        assert await store.append(SEG, 8) == 100
        with pytest.raises(ValueError):
            await store.append(SEG, 0)
    block = server.requests(wc.AppendBlockEnd)[0]
    assert isinstance(block, wc.AppendBlockEnd)
    assert block.last_event_number == 7 and block.data == struct.pack(">ii", 0, 0)


@pytest.mark.parametrize(
    ("on", "reply", "outcome"),
    [
        ("AppendBlockEnd", "SegmentIsSealed", IllegalState),
        ("SetupAppend", "SegmentIsSealed", IllegalState),
        ("SetupAppend", "NoSuchSegment", NotFound),
        ("AppendBlockEnd", "TableRead", FinalFailure),
    ],
)
async def test_append_refusals(
    make_store: Callable[..., WireSegmentStore], on: str, reply: str, outcome: type[Exception]
) -> None:
    async with scripted(answering(**{on: reply_of(reply)})) as server:
        with pytest.raises(outcome):
            await make_store(server.endpoint).append(SEG, 10)
