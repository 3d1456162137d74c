"""The embedded stores of one `serve --processes N` run, told of each other's changes and traffic
(app/segmentstore/server/peers.py), over real Unix datagram sockets in one test process: changes
reach every other store once per loop turn, observations reach the judging store only (a turn's
appends summed, their order with other observations kept), a peer whose queue is full gets the
rest later and in order, a peer that is down costs nothing, and a malformed datagram is dropped.
The last tests put MeasuredStorage on both ends over the real storage: what a forwarding store
sees is what the judge counts."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from app.segmentstore.autoscaler import AutoScaleMonitor
from app.segmentstore.measured_storage import MeasuredStorage
from app.segmentstore.server.peers import MAX_DATAGRAM, Observation, PeerError, StorePeers, socket_path
from app.segmentstore.storage import AppendRequest
from app.store.segment_data import PgSegmentStorage
from app.store.tier_throttle import TierThrottle
from tests.segmentstore.test_measured_storage import EVENTS, NO_SCALING, TICK_MS, RecordingSink, Store


@pytest.fixture
def directory() -> Iterator[Path]:
    # A short path: a Unix socket's name has at most 107 bytes.
    path = Path("/tmp") / f"peers-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o700)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


class Heard:
    def __init__(self, peers: StorePeers) -> None:
        self.changed: list[str] = []
        self.observed: list[Observation] = []
        peers.on_changed(self.changed.append)
        peers.on_observed(self.observed.append)


@pytest.fixture
async def group(directory: Path) -> AsyncIterator[Callable[[int], StorePeers]]:
    started: list[StorePeers] = []

    def start(index: int, size: int = 3) -> StorePeers:
        peers = StorePeers(directory, index, size)
        peers.start()
        started.append(peers)
        return peers

    yield start
    for peers in started:
        peers.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_changes_reach_every_other_store_once_per_turn(group: Callable[[int], StorePeers]) -> None:
    judge, one, two = group(0), group(1), group(2)
    heard = {p.index: Heard(p) for p in (judge, one, two)}
    for name in ("a", "b", "a", "c"):
        one.changed(name)
    await settle()
    assert heard[0].changed == ["a", "b", "c"]
    assert heard[2].changed == ["a", "b", "c"]
    assert heard[1].changed == []  # not to itself
    assert one.sent == 2  # one datagram to each other store for the whole turn


async def test_observations_go_to_the_judge_only_with_a_turns_appends_summed_in_order(
    group: Callable[[int], StorePeers],
) -> None:
    judge, one, two = group(0), group(1), group(2)
    heard = {p.index: Heard(p) for p in (judge, one, two)}
    one.observe(["appended", "s", 2, 100])
    one.observe(["appended", "t", 1, 10])
    one.observe(["appended", "s", 3, 50])
    one.observe(["merged", "s", ["s#transaction.1"]])
    one.observe(["appended", "s", 1, 1])
    await settle()
    assert heard[0].observed == [
        ["appended", "s", 5, 150],
        ["appended", "t", 1, 10],
        ["merged", "s", ["s#transaction.1"]],
        ["appended", "s", 1, 1],
    ]
    assert heard[2].observed == []
    with pytest.raises(PeerError):
        judge.observe(["appended", "s", 1, 1])


async def test_a_full_peer_gets_the_rest_later_in_order(
    directory: Path, group: Callable[[int], StorePeers]
) -> None:
    sender = group(1, 2)
    # The judge's socket bound but not read: its queue fills and the sender must hold on.
    judge = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    judge.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    judge.bind(str(socket_path(directory, 0)))
    try:
        names = [f"segment-{n:05d}" for n in range(3000)]
        for name in names:
            sender.changed(name)
            await asyncio.sleep(0)  # a turn each: one datagram each
        await settle()
        assert sender.deferred > 0, "the judge's queue never filled: nothing was held back"
        assert sender.dropped == 0
        got: list[str] = []
        judge.setblocking(False)
        deadline = asyncio.get_running_loop().time() + 10
        while len(got) < len(names):
            try:
                kind, items = json.loads(judge.recv(MAX_DATAGRAM + 1024))
            except BlockingIOError:
                assert asyncio.get_running_loop().time() < deadline, f"{len(got)} of {len(names)}"
                await asyncio.sleep(0.01)
                continue
            assert kind == "changed"
            got += items
        assert got == names
    finally:
        judge.close()


async def test_a_peer_that_is_down_costs_nothing_and_is_reached_once_back(
    group: Callable[[int], StorePeers],
) -> None:
    one = group(1, 2)
    one.changed("before")
    await settle()
    assert one.sent == 0 and one.dropped == 0
    judge = group(0, 2)
    heard = Heard(judge)
    one.changed("after")
    await settle()
    assert heard.changed == ["after"]


async def test_a_malformed_datagram_is_dropped_and_later_ones_still_heard(
    directory: Path, group: Callable[[int], StorePeers], caplog: pytest.LogCaptureFixture
) -> None:
    judge = group(0, 2)
    heard = Heard(judge)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
        for junk in (b"\xff", b"{}", b'["changed", [1]]', b'["gossip", []]', b'["changed", "x"]'):
            stranger.sendto(junk, str(socket_path(directory, 0)))
    with caplog.at_level(logging.WARNING, "pgcontroller.segment-store.peers"):
        await settle()
    assert len([r for r in caplog.records if "malformed" in r.message]) == 5
    one = group(1, 2)
    one.changed("fine")
    await settle()
    assert heard.changed == ["fine"]


async def test_the_judges_throttled_containers_reach_the_others_throttles_and_expire_unrenewed(
    directory: Path, group: Callable[[int], StorePeers], caplog: pytest.LogCaptureFixture
) -> None:
    judge, one = group(0, 2), group(1, 2)
    mine = TierThrottle(1000, 5.0, lambda segment: int(segment.rsplit("/", 1)[1]))
    theirs = TierThrottle(1000, 5.0, lambda segment: int(segment.rsplit("/", 1)[1]))
    mine.on_update = judge.throttled
    one.on_throttled(lambda over: theirs.heard(over, 0.3))
    with pytest.raises(PeerError):
        one.throttled([1])
    mine.update({2: 5000, 3: 10})
    await settle()
    assert theirs.over == {2}
    assert theirs.admission("s/3") is None
    waiting = theirs.admission("s/2")
    assert waiting is not None
    task = asyncio.ensure_future(waiting)
    await asyncio.sleep(0.05)
    assert not task.done()
    mine.update({2: 10})  # the writer caught up: an empty verdict is news too
    await settle()
    await asyncio.wait_for(task, 1.0)
    assert theirs.over == frozenset()
    mine.update({2: 5000})
    await settle()
    assert theirs.over == {2}
    # Store 0 goes quiet (gone): its last verdict stops holding.
    await asyncio.sleep(0.4)
    assert theirs.admission("s/2") is None and theirs.over == frozenset()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as stranger:
        stranger.sendto(b'["throttled", ["2"]]', str(socket_path(directory, 1)))
    with caplog.at_level(logging.WARNING, "pgcontroller.segment-store.peers"):
        await settle()
    assert [r for r in caplog.records if "malformed" in r.message]
    assert theirs.over == frozenset()


async def test_a_group_is_checked_when_made_and_started(directory: Path) -> None:
    with pytest.raises(PeerError, match="at least 2"):
        StorePeers(directory, 0, 1)
    with pytest.raises(PeerError, match="outside"):
        StorePeers(directory, 2, 2)
    with pytest.raises(PeerError, match="too long"):
        StorePeers(directory / ("d" * 120), 0, 2)
    with pytest.raises(PeerError, match=r"cannot bind its group socket .*/missing/store-1\.sock"):
        StorePeers(directory / "missing", 1, 2).start()


async def test_the_judge_counts_what_a_forwarding_store_measured(
    group: Callable[[int], StorePeers], storage: PgSegmentStorage
) -> None:
    """A segment created, appended to and merged into through store 1 is measured by store 0's
    monitor exactly as a single store that served it all measures it."""
    judge_peers, forwarding_peers = group(0, 2), group(1, 2)
    judge, single = Store(storage), Store(storage)
    judge_peers.on_observed(judge.measured.apply)
    forwarding = MeasuredStorage(
        storage, AutoScaleMonitor(RecordingSink(), judge.clock), judge.clock, forwarding_peers.observe
    )
    for measured, store in ((forwarding, judge), (single.measured, single)):
        name = store.segment()
        txn = name + "#transaction.00000000000000000000000000000001"
        await measured.create_segment(name, "stream", EVENTS, 10, 0)
        await measured.create_segment(txn, "transaction", NO_SCALING, 0, 0)
        await settle()
        assert store.monitor.is_tracked(name)
        for n in range(1, 11):
            store.clock.advance(500)
            await measured.append(AppendRequest(name, 1, b"x" * 10, n, 3))
        await measured.append(AppendRequest(txn, 2, b"y" * 10, 1, 4))
        await measured.merge(name, [txn], [])
        await settle()
        store.clock.advance(TICK_MS + 1)
        assert store.monitor.record(name, 0, 0)
    assert judge.rates(judge.segment())[0] > 0
    assert judge.rates(judge.segment()) == single.rates(single.segment())
    assert judge.measured._tallies == {}  # the transaction's tally went with its merge
    # The forwarding store's own monitor saw nothing: it reports nothing.
    assert not forwarding.monitor.is_tracked(judge.segment())
    await forwarding.seal(judge.segment())
    await settle()
    assert not judge.monitor.is_tracked(judge.segment())


async def test_a_nonsense_observation_is_dropped(
    storage: PgSegmentStorage, caplog: pytest.LogCaptureFixture
) -> None:
    judge = Store(storage)
    with caplog.at_level(logging.WARNING, "pgcontroller.autoscaler"):
        judge.measured.apply(["appended", "s", "many", 1])
        judge.measured.apply(["exploded"])
    assert len([r for r in caplog.records if "makes no sense" in r.message]) == 2
