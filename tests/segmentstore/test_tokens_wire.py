"""Delegation tokens at the segment store with authentication on, over real TCP: the controller's
client (its master token) does everything; tokens the controller signs for a stream are checked
per request; expired, forged, tampered, foreign and too weak tokens get AuthTokenCheckFailed with
Pravega's error code, and the connection goes on serving."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.security.tokens import Permission, TokenSigner, TokenVerifier, stream_resource
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.tokens import TOKEN_CHECK_FAILED, TOKEN_EXPIRED, TokenGate
from app.segmentstore.wire import commands as wc
from app.store.segment_data import PgSegmentStorage
from app.testing.segment_store import OneHost
from tests.segmentstore.segment_commands import NAMING_SEGMENTS, build, name_count
from tests.segmentstore.server_harness import Client, event, rid, wid

KEY = b"the cluster's delegation-token signing key, shared by the controller and every store"
SEG = "sc/st/0.#epoch.0"
OTHER = "sc/other/0.#epoch.0"
T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(storage: PgSegmentStorage, clock: Clock) -> AsyncIterator[SegmentStoreServer]:
    started = await SegmentStoreServer.start(
        storage, "127.0.0.1", 0, tail_wait_s=0.5, tokens=TokenGate(TokenVerifier(KEY, now=clock))
    )
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
async def controller(server: SegmentStoreServer, clock: Clock) -> AsyncIterator[WireSegmentStore]:
    master = TokenSigner(KEY, now=clock).master()
    client = WireSegmentStore(OneHost(HostAddress(*server.address)), token=lambda: master)
    try:
        await client.create_segment(SEG, 0, 0, 0)
        await client.create_segment(OTHER, 0, 0, 0)
        yield client
    finally:
        await client.close()


def token(
    clock: Clock, permission: Permission = Permission.READ_UPDATE, stream: str = "st", ttl_s: int = 60
) -> str:
    return TokenSigner(KEY, ttl_s, now=clock).issue(stream_resource("sc", stream), permission)


async def refused(c: Client, cmd: wc.Command, code: int) -> None:
    reply = await c.call(cmd)
    assert reply == wc.AuthTokenCheckFailed(cmd.request_id, "", code), reply


async def test_the_controllers_own_calls_work_with_its_master_token(controller: WireSegmentStore) -> None:
    await controller.append(SEG, 10)
    await controller.create_transaction_segment(SEG, 1, 2, 0)
    await controller.merge_transaction_segments(SEG, [(1, 2)])
    await controller.truncate_segment(SEG, 5)
    assert await controller.seal_segment(SEG) == 10
    await controller.create_table_segment("_system/_tables/sc/t", 0, 0)
    await controller.delete_table_segment("_system/_tables/sc/t", False)
    await controller.delete_segment(SEG)


async def test_a_client_of_the_controller_without_the_key_is_refused(server: SegmentStoreServer) -> None:
    forged = TokenSigner(b"not the cluster's key", now=lambda: T0).master()
    client = WireSegmentStore(OneHost(HostAddress(*server.address)), token=lambda: forged)
    try:
        with pytest.raises(StoreUnavailable, match="refused the token"):
            await client.create_segment("sc/x/0.#epoch.0", 0, 0, 0)
    finally:
        await client.close()


async def test_a_stream_token_writes_and_reads_its_stream(
    server: SegmentStoreServer, controller: WireSegmentStore, clock: Clock
) -> None:
    c = await Client.connect(server.address)
    writer, good = wid(), token(clock)
    await c.expect(wc.SetupAppend(rid(), writer, SEG, good), wc.AppendSetup)
    assert isinstance(await c.append(writer, event(b"hi"), 1), wc.DataAppended)
    read = await c.expect(wc.ReadSegment(SEG, 0, 1024, token(clock, Permission.READ), rid()), wc.SegmentRead)
    assert read.data == event(b"hi")
    await c.close()


@pytest.mark.parametrize(
    "make, code",
    [
        (lambda clock: "", TOKEN_CHECK_FAILED),
        (lambda clock: token(clock, ttl_s=1), None),  # expired below
        (
            lambda clock: TokenSigner(b"another key", now=clock).issue(
                stream_resource("sc", "st"), Permission.READ_UPDATE
            ),
            TOKEN_CHECK_FAILED,
        ),
        (lambda clock: tampered(token(clock, Permission.READ)), TOKEN_CHECK_FAILED),
        (lambda clock: token(clock, stream="other"), TOKEN_CHECK_FAILED),
        (lambda clock: token(clock, Permission.READ), TOKEN_CHECK_FAILED),
    ],
    ids=["empty", "expired", "wrong-signature", "tampered-claims", "wrong-stream", "read-token-on-append"],
)
async def test_a_bad_token_on_setup_append_is_refused_with_pravegas_code(
    server: SegmentStoreServer, controller: WireSegmentStore, clock: Clock, make: object, code: int | None
) -> None:
    bad = make(clock)  # type: ignore[operator]
    if code is None:
        clock.now += 1
        code = TOKEN_EXPIRED
    c = await Client.connect(server.address)
    writer = wid()
    await refused(c, wc.SetupAppend(rid(), writer, SEG, bad), code)
    # The connection is not wedged: the same writer sets up with a good token and appends.
    await c.expect(wc.SetupAppend(rid(), writer, SEG, token(clock)), wc.AppendSetup)
    assert isinstance(await c.append(writer, event(b"ok"), 1), wc.DataAppended)
    assert (await controller.get_segment_info(SEG)).length == len(event(b"ok"))
    await c.close()


def tampered(good: str) -> str:
    import base64
    import json

    header, payload, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["prn::/scope:sc/stream:st"] = "READ_UPDATE"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


async def test_every_request_carrying_a_token_is_checked(
    server: SegmentStoreServer, controller: WireSegmentStore, clock: Clock
) -> None:
    c = await Client.connect(server.address)
    read_only, expired = token(clock, Permission.READ), token(clock, ttl_s=1)
    # Reads need READ: a READ token reads, an empty or foreign one does not.
    await c.expect(wc.GetStreamSegmentInfo(rid(), SEG, read_only), wc.StreamSegmentInfo)
    await refused(c, wc.GetStreamSegmentInfo(rid(), OTHER, read_only), TOKEN_CHECK_FAILED)
    await refused(c, wc.ReadSegment(SEG, 0, 10, "", rid()), TOKEN_CHECK_FAILED)
    # Changes need READ_UPDATE.
    await refused(c, wc.SealSegment(rid(), SEG, read_only), TOKEN_CHECK_FAILED)
    await refused(c, wc.TruncateSegment(rid(), SEG, 0, read_only), TOKEN_CHECK_FAILED)
    await refused(c, wc.DeleteSegment(rid(), SEG, read_only), TOKEN_CHECK_FAILED)
    await refused(c, wc.CreateSegment(rid(), "sc/st/9.#epoch.1", 0, 0, read_only), TOKEN_CHECK_FAILED)
    # A merge needs the right on its sources too: a transaction of another stream is refused.
    await controller.create_transaction_segment(OTHER, 0, 1, 0)
    txn = "sc/other/0.#epoch.0#transaction.00000000000000000000000000000001"
    await refused(c, wc.MergeSegmentsBatch(rid(), SEG, (txn,), token(clock)), TOKEN_CHECK_FAILED)
    clock.now += 1
    await refused(c, wc.ReadSegment(SEG, 0, 10, expired, rid()), TOKEN_EXPIRED)
    # Nothing was changed by the refused requests.
    info = await controller.get_segment_info(SEG)
    assert (info.length, info.sealed) == (0, False)
    await c.close()


async def test_every_command_naming_a_segment_is_refused_without_a_token_for_each_of_them(
    server: SegmentStoreServer, controller: WireSegmentStore, clock: Clock
) -> None:
    # Driven by the declaration (every field marked Names.SEGMENT): a new command is covered as
    # soon as it is declared. Refused with no token, and with a token for SEG's stream when any
    # one of the segments it names is another stream's; replies, which carry no token, too.
    c = await Client.connect(server.address)
    good = token(clock)
    for cls in NAMING_SEGMENTS:
        count = name_count(cls)
        variants = [([SEG] * count, "")]
        variants += [([OTHER if j == i else SEG for j in range(count)], good) for i in range(count)]
        for names, carried in variants:
            request_id = rid()
            reply = await c.call(build(cls, names, carried, request_id))
            assert reply == wc.AuthTokenCheckFailed(request_id, "", TOKEN_CHECK_FAILED), (cls.__name__, names)
    # Nothing was changed, and the connection still serves a request with a good token.
    for name in (SEG, OTHER):
        info = await controller.get_segment_info(name)
        assert (info.length, info.sealed) == (0, False)
    await c.expect(wc.GetStreamSegmentInfo(rid(), SEG, good), wc.StreamSegmentInfo)
    await c.close()


async def test_a_writers_token_expiring_closes_its_connection_and_a_fresh_token_goes_on(
    server: SegmentStoreServer, controller: WireSegmentStore, clock: Clock
) -> None:
    c = await Client.connect(server.address)
    writer = wid()
    await c.expect(wc.SetupAppend(rid(), writer, SEG, token(clock, ttl_s=5)), wc.AppendSetup)
    assert isinstance(await c.append(writer, event(b"one"), 1), wc.DataAppended)
    clock.now += 5
    # As Pravega's store: the connection closes; the unacknowledged block is not stored.
    await c.send(wc.AppendBlockEnd(writer, len(event(b"two")), event(b"two"), 1, 2, rid()))
    assert await c.closed_by_server()
    await c.close()
    again = await Client.connect(server.address)
    await again.expect(wc.SetupAppend(rid(), writer, SEG, token(clock)), wc.AppendSetup)
    assert isinstance(await again.append(writer, event(b"two"), 2), wc.DataAppended)
    assert (await controller.get_segment_info(SEG)).length == len(event(b"one")) + len(event(b"two"))
    await again.close()
