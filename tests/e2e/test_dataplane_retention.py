"""Retention by consumption with the real Pravega Python client against `serve` alone: two
subscriber reader groups read different amounts of a stream, and the retention worker truncates
only what both have read; the truncation reaches the segment store, whose chunk rows below the
new head are gone and whose reads before the head answer SegmentIsTruncated; when the slower
group reads on, truncation follows; a group created afterwards reads from the head on.

The Python client (0.3.8, on the Rust client) keeps its reader groups in a table segment and
never calls createReaderGroup or updateSubscriberStreamCut. So the test does what a Java
application with MANUAL_RELEASE_AT_USER_STREAMCUT retention does: it registers each group with
createReaderGroup under the client's group name, and hands the group's own stream cut (the
positions its reader consumed up to, from the client's get_streamcut) to
updateSubscriberStreamCut with the group's id and generation.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.hosts import HostAddress
from app.domain.ids import qualified_segment_name
from app.segmentstore.client.connections import Connection, next_request_id
from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess
from tests.support.dataplane import ClientProcess, Controller, read_events, start_with_segment_store

# Above the sum of the deadlines inside, which fail a test with what the client saw.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

SCOPE, STREAM = "consumed", "s"
SEGMENTS = (0, 1)  # epoch 0 of a fixed two-segment stream
EVENTS, KEYS, SIZE = 400, 8, 200
# The fast group leaves only a few events unread, so on every segment it is past what the slow
# one read first, whichever segment the slow reader happened to take first: the first bound is
# the slow group's cut, then the slow group's and the fast one's as the slow one reads on.
FAST_READS, SLOW_READS, SLOW_MORE = EVENTS - 10, 100, 120
LONG_MAX = 2**63 - 1
# The retention period (Pravega's 30 minutes): short, so a cycle follows every published cut.
RETENTION_FREQUENCY_MS = 300
# A client process now and then stalls 30 s (its request timeout) inside a blocking call while
# its runtime waits for the GIL; a role's deadline leaves room for two such stalls.
CLIENT_TIMEOUT_S = 80.0
TRUNCATION_TIMEOUT_S = 30.0


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(
        tmp_path, "--db-url", db_url, "--retention-frequency-ms", str(RETENTION_FREQUENCY_MS)
    )
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


@dataclass(frozen=True)
class Subscriber:
    """A reader group registered as Java's ReaderGroupManager registers one with retention."""

    name: str
    group_id: str
    generation: int

    @property
    def scoped(self) -> str:
        return f"{SCOPE}/{self.name}"  # NameUtils.getScopedReaderGroupName


async def register(stub: ControllerServiceStub, name: str) -> Subscriber:
    reply = await stub.createReaderGroup(
        pb.ReaderGroupConfiguration(
            scope=SCOPE,
            readerGroupName=name,
            groupRefreshTimeMillis=3000,
            automaticCheckpointIntervalMillis=30_000,
            maxOutstandingCheckpointRequest=3,
            retentionType=pb.ReaderGroupConfiguration.MANUAL,
            generation=0,
            readerGroupId=str(uuid.uuid4()),
            startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope=SCOPE, stream=STREAM))],
        )
    )
    assert reply.status == pb.CreateReaderGroupResponse.SUCCESS, reply
    return Subscriber(name, reply.config.readerGroupId, reply.config.generation)


async def publish(stub: ControllerServiceStub, subscriber: Subscriber, cut: Mapping[int, int]) -> None:
    """ReaderGroup.updateRetentionStreamCut: the group's cut goes to updateSubscriberStreamCut."""
    reply = await stub.updateSubscriberStreamCut(
        pb.SubscriberStreamCut(
            subscriber=subscriber.scoped,
            generation=subscriber.generation,
            readerGroupId=subscriber.group_id,
            streamCut=pb.StreamCut(streamInfo=pb.StreamInfo(scope=SCOPE, stream=STREAM), cut=dict(cut)),
        )
    )
    assert reply.status == pb.UpdateSubscriberStatus.SUCCESS, (subscriber, cut, reply)


def segment_id(key: str) -> int:
    """The client names a segment by its number or by its qualified name."""
    if key.isdigit():
        return int(key)
    for segment in SEGMENTS:
        if key.endswith(qualified_segment_name(SCOPE, STREAM, segment)):
            return segment
    raise AssertionError(f"the client's cut names an unknown segment {key!r}")


async def read_group(
    served: ServedProcess, tmp_path: Path, group: str, reader: str, **args: object
) -> tuple[list[str], dict[int, int]]:
    """One run of the real client's reader in `group`: the events it read, and the group's cut
    once the reader went offline."""
    out = tmp_path / f"{group}-{reader}.json"
    process = await ClientProcess.start(
        "group-read", tmp_path, uri=served.grpc_uri, scope=SCOPE, stream=STREAM, group=group,
        reader=reader, deadline_s=CLIENT_TIMEOUT_S, out=str(out), **args,
    )  # fmt: skip
    try:
        result = await process.result(CLIENT_TIMEOUT_S + 10)
    finally:
        await process.kill()
    names = [name for _, name in read_events(out)]
    cut = {segment_id(k): v for k, v in (result["cut"] or {}).items()}
    return names, cut


def per_key(names: list[str]) -> dict[str, list[int]]:
    keys: dict[str, list[int]] = defaultdict(list)
    for name in names:
        key, _, seq = name.removeprefix("e").partition(":")
        keys[key].append(int(seq))
    return keys


def prefix_counts(names: list[str]) -> Counter[str]:
    """For each routing key how many events were read; they must be the key's first ones, in
    order (a reader group consumes each segment from its start cut on)."""
    counts: Counter[str] = Counter()
    for key, seqs in per_key(names).items():
        assert seqs == list(range(len(seqs))), f"key {key} read out of order or not from its start"
        counts[key] = len(seqs)
    return counts


async def segment_rows(db: asyncpg.Connection) -> dict[int, asyncpg.Record]:
    """Each segment's start and length, with what its chunk rows hold."""
    rows = await db.fetch(
        """
        SELECT s.name, s.start_offset, s.length,
               count(c.*) AS chunks,
               count(c.*) FILTER (
                   WHERE c.start_offset + COALESCE(c.lz4_length, octet_length(c.data)) <= s.start_offset
               ) AS below,
               min(c.start_offset) AS first_chunk,
               coalesce(sum(COALESCE(c.lz4_length, octet_length(c.data))), 0) AS stored
        FROM embedded_segments s LEFT JOIN segment_chunks c ON c.segment = s.name
        WHERE s.name = ANY($1::text[])
        GROUP BY s.name, s.start_offset, s.length
        """,
        [qualified_segment_name(SCOPE, STREAM, s) for s in SEGMENTS],
    )
    by_name = {row["name"]: row for row in rows}
    return {s: by_name[qualified_segment_name(SCOPE, STREAM, s)] for s in SEGMENTS}


async def wait_for_head(db: asyncpg.Connection, head: Mapping[int, int]) -> dict[int, asyncpg.Record]:
    """Waits until the store's segments start at `head` (the retention worker's cycle, its
    truncation request and the store's truncation all ran); fails on a head beyond it."""
    deadline = time.monotonic() + TRUNCATION_TIMEOUT_S
    while True:
        rows = await segment_rows(db)
        starts = {s: int(row["start_offset"]) for s, row in rows.items()}
        beyond = {s: o for s, o in starts.items() if o > head[s]}
        assert not beyond, f"truncated past what every subscriber read: {starts}, wanted {dict(head)}"
        if starts == dict(head):
            return rows
        assert time.monotonic() < deadline, f"segments start at {starts}, wanted {dict(head)}"
        await asyncio.sleep(0.05)


def check_reclaimed(rows: Mapping[int, asyncpg.Record]) -> None:
    """No chunk row lies wholly below a segment's head, and what is kept still holds every byte
    from the head to the end."""
    for segment, row in rows.items():
        start, length = int(row["start_offset"]), int(row["length"])
        assert row["below"] == 0, f"segment {segment}: {row['below']} chunk rows below its head {start}"
        if start < length:
            assert row["first_chunk"] is not None and int(row["first_chunk"]) <= start, dict(row)
        assert int(row["stored"]) >= length - start, dict(row)


async def read_at(served: ServedProcess, segment: int, offset: int) -> wc.Command:
    assert served.segment_store_port is not None
    connection = await Connection.open(HostAddress("127.0.0.1", served.segment_store_port), 5.0)
    try:
        name = qualified_segment_name(SCOPE, STREAM, segment)
        return await connection.request(wc.ReadSegment(name, offset, 1000, "", next_request_id()), 5.0)
    finally:
        connection.close()


async def check_reads_around(served: ServedProcess, rows: Mapping[int, asyncpg.Record]) -> None:
    """Over the wire: a read before the head answers SegmentIsTruncated naming the head; a read
    at the head (unless it is the tail, where a read waits for appends) answers bytes."""
    for segment, row in rows.items():
        start, length = int(row["start_offset"]), int(row["length"])
        if start == 0:
            continue
        before = await read_at(served, segment, start - 1)
        assert isinstance(before, wc.SegmentIsTruncated), before
        assert before.start_offset == start, before
        if start == length:
            continue
        at = await read_at(served, segment, start)
        assert isinstance(at, wc.SegmentRead) and at.offset == start and at.data, at


def lower_bound(*cuts: Mapping[int, int]) -> dict[int, int]:
    return {s: min(cut.get(s, 0) for cut in cuts) for s in SEGMENTS}


async def test_retention_by_consumption_truncates_only_what_every_subscriber_read(
    served: ServedProcess, db_url: str, tmp_path: Path
) -> None:
    controller = Controller(served)
    db = await asyncpg.connect(db_url)
    try:
        stub = controller.stub
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        info = pb.StreamInfo(scope=SCOPE, stream=STREAM)
        created = await stub.createStream(
            pb.StreamConfig(
                streamInfo=info,
                scalingPolicy=pb.ScalingPolicy(minNumSegments=len(SEGMENTS)),
                # By size, at least 1 byte kept and no upper limit: the subscribers' lower bound
                # alone decides (Pravega's SIZE rule uses it when min <= retained < max).
                retentionPolicy=pb.RetentionPolicy(
                    retentionType=pb.RetentionPolicy.SIZE, retentionParam=1, retentionMax=LONG_MAX
                ),
            )
        )
        assert created.status == pb.CreateStreamStatus.SUCCESS, created
        fast, slow = await register(stub, "fast"), await register(stub, "slow")
        listed = await stub.listSubscribers(info)
        assert sorted(listed.subscribers) == [fast.scoped, slow.scoped], listed
        # Both groups start at the stream's head: their first release is that cut, so the
        # policy alone never truncates what they have yet to read.
        for subscriber in (fast, slow):
            await publish(stub, subscriber, dict.fromkeys(SEGMENTS, 0))

        # A group without retention, made before the writes and then left behind: retention
        # does not wait for it.
        _, bystander_cut = await read_group(served, tmp_path, "bystander", "r1", stop_after=0)
        assert bystander_cut == dict.fromkeys(SEGMENTS, 0), bystander_cut

        # Small flushes: many appends, so many chunk rows, most of them wholly below the head.
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope=SCOPE, stream=STREAM, count=EVENTS,
            keys=KEYS, size=SIZE, progress_every=10,
        )  # fmt: skip
        try:
            assert (await writer.result(CLIENT_TIMEOUT_S))["written"] == EVENTS
        finally:
            await writer.kill()
        before = await segment_rows(db)
        assert sum(int(r["length"]) for r in before.values()) >= EVENTS * SIZE, before

        fast_names, fast_cut = await read_group(served, tmp_path, "fast", "r1", stop_after=FAST_READS)
        slow_names, slow_cut = await read_group(served, tmp_path, "slow", "r1", stop_after=SLOW_READS)
        assert len(slow_names) < len(fast_names) < EVENTS, (len(slow_names), len(fast_names))
        await publish(stub, fast, fast_cut)
        await publish(stub, slow, slow_cut)

        first = lower_bound(fast_cut, slow_cut)
        assert any(first.values()), first
        rows = await wait_for_head(db, first)
        check_reclaimed(rows)
        assert sum(int(r["chunks"]) for r in rows.values()) < sum(int(r["chunks"]) for r in before.values())
        await check_reads_around(served, rows)

        # The slow group reads on (its positions survived in the client's group state).
        more_names, slow_cut = await read_group(served, tmp_path, "slow", "r2", stop_after=SLOW_MORE)
        slow_names += more_names
        await publish(stub, slow, slow_cut)
        second = lower_bound(fast_cut, slow_cut)
        assert all(second[s] >= first[s] for s in SEGMENTS) and second != first, (first, second)
        rows = await wait_for_head(db, second)
        check_reclaimed(rows)
        await check_reads_around(served, rows)

        # A group created now reads from the head on: exactly what not every subscriber read.
        await controller.seal(info)
        late_names, _ = await read_group(served, tmp_path, "late", "r1")
        # The group left behind reads on: the store answers its reads before the head with
        # SegmentIsTruncated, which the client takes as the end of that segment.
        bystander_names, _ = await read_group(served, tmp_path, "bystander", "r2")
    finally:
        await db.close()
        controller.close()

    fast_counts, slow_counts = prefix_counts(fast_names), prefix_counts(slow_names)
    assert len(late_names) == len(set(late_names)), "the late group read events twice"
    late = per_key(late_names)
    assert len(bystander_names) == len(set(bystander_names)), "the bystander read events twice"
    bystander = per_key(bystander_names)
    per_key_total = EVENTS // KEYS
    for key in (f"{k:03d}" for k in range(KEYS)):
        # A key lives on one segment; its head is where the group behind on that segment stood.
        gone = min(fast_counts[key], slow_counts[key])
        assert late.get(key, []) == list(range(gone, per_key_total)), (key, gone, late.get(key))
        # The Rust client (0.3.8) drops a segment whose read answers SegmentIsTruncated (it asks
        # for successors, as at a sealed end, where Java's reader moves to the segment's head):
        # on a segment truncated ahead of it, it reads nothing; on the others, everything.
        assert bystander.get(key, []) == ([] if gone else list(range(per_key_total))), (key, gone)
