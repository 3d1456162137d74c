"""AckPipeline (app/segmentstore/server/acks.py): appends that end together (one group commit)
are acknowledged in one send, in arrival order; an append that fails is met after the
acknowledgements before it, and nothing after it is acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.segmentstore.server.acks import AckPipeline
from app.segmentstore.wire import commands as wc


class Peer:
    def __init__(self) -> None:
        self.sends: list[list[int]] = []
        self.failures: list[BaseException] = []

    async def send(self, replies: Sequence[wc.Command]) -> None:
        self.sends.append([reply.request_id for reply in replies if isinstance(reply, wc.DataAppended)])

    async def failed(self, exc: BaseException) -> None:
        self.failures.append(exc)


def _ack(n: int) -> wc.DataAppended:
    return wc.DataAppended(1, n, n - 1, request_id=n, current_segment_write_offset=n)


async def _stored(commit: asyncio.Event, n: int, fail: bool = False) -> wc.Command:
    await commit.wait()
    if fail:
        raise RuntimeError("the database went away")
    return _ack(n)


async def test_appends_that_end_together_are_acknowledged_in_one_send_in_order() -> None:
    peer, group = Peer(), asyncio.Event()
    acks = AckPipeline(peer.send, peer.failed)
    for n in (1, 2, 3):
        await acks.start(_stored(group, n), 10)
    alone = asyncio.Event()
    await acks.start(_stored(alone, 4), 10)
    await asyncio.sleep(0.01)  # every append waiting for its commit, as in a group in flight
    group.set()
    await asyncio.sleep(0.01)
    assert peer.sends == [[1, 2, 3]]
    alone.set()
    await acks.drain()
    assert peer.sends == [[1, 2, 3], [4]] and not peer.failures


async def test_a_failed_append_ends_the_acknowledgements_at_the_ones_before_it() -> None:
    peer, group = Peer(), asyncio.Event()
    acks = AckPipeline(peer.send, peer.failed)
    await acks.start(_stored(group, 1), 10)
    await acks.start(_stored(group, 2), 10)
    await acks.start(_stored(group, 3, fail=True), 10)
    await acks.start(_stored(group, 4), 10)
    await asyncio.sleep(0.01)
    group.set()
    await acks.drain()
    assert peer.sends == [[1, 2]]
    assert [str(exc) for exc in peer.failures] == ["the database went away"]
    assert await acks.start(_stored(group, 5), 10) is None


async def test_drain_returns_once_a_failure_was_handled_and_the_pipeline_takes_no_more() -> None:
    peer, group = Peer(), asyncio.Event()
    handled = asyncio.Event()

    async def failed(exc: BaseException) -> None:
        await asyncio.sleep(0.05)  # as the connection's pause before it closes
        peer.failures.append(exc)
        handled.set()

    acks = AckPipeline(peer.send, failed)
    await acks.start(_stored(group, 1), 10)
    await acks.start(_stored(group, 2, fail=True), 10)
    group.set()
    await asyncio.wait_for(acks.drain(), 5)
    assert handled.is_set() and peer.sends == [[1]] and not acks
    assert await acks.start(_stored(group, 3), 10) is None


async def test_appends_after_a_quiet_spell_are_acknowledged_as_they_end() -> None:
    peer = Peer()
    acks = AckPipeline(peer.send, peer.failed)
    for n in (1, 2, 3):
        commit = asyncio.Event()
        await acks.start(_stored(commit, n), 10)
        assert acks  # in flight until its reply is sent
        await asyncio.sleep(0.01)
        assert peer.sends == [[m] for m in range(1, n)]
        commit.set()
        await asyncio.wait_for(acks.drain(), 5)
        assert peer.sends == [[m] for m in range(1, n + 1)] and not acks


async def test_a_peer_gone_while_replies_are_sent_ends_the_pipeline_quietly() -> None:
    sent: list[int] = []
    failures: list[BaseException] = []

    async def send(replies: Sequence[wc.Command]) -> None:
        sent.extend(reply.request_id for reply in replies if isinstance(reply, wc.DataAppended))
        raise ConnectionResetError("the peer left")

    async def failed(exc: BaseException) -> None:
        failures.append(exc)

    commit = asyncio.Event()
    acks = AckPipeline(send, failed)
    await acks.start(_stored(commit, 1), 10)
    commit.set()
    await asyncio.wait_for(acks.drain(), 5)
    assert sent == [1] and not failures and not acks
    assert await acks.start(_stored(commit, 2), 10) is None
    await acks.close()  # nothing left: no task exception is left unretrieved either


async def test_a_reply_that_fails_to_send_is_handled_before_drain_returns() -> None:
    handled = asyncio.Event()

    async def send(replies: Sequence[wc.Command]) -> None:
        raise ValueError("cannot encode")

    async def failed(exc: BaseException) -> None:
        await asyncio.sleep(0.05)
        handled.set()

    commit = asyncio.Event()
    acks = AckPipeline(send, failed)
    await acks.start(_stored(commit, 1), 10)
    commit.set()
    await asyncio.sleep(0)
    await asyncio.wait_for(acks.drain(), 5)
    assert handled.is_set() and not acks
    assert await acks.start(_stored(commit, 2), 10) is None
