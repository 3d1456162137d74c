"""Events over 8 MiB through the embedded segment store, with the real Pravega Python client.

The client (0.3.8, Rust 0.3.7 inside) sends an event over 8 MiB through a transient segment
(CreateTransientSegment, SetupAppend, 8 MiB ConditionalBlockEnds, MergeSegments) but cannot
serialize one of 16 MiB or more: its codec caps an Event command at MAX_WIRECOMMAND_SIZE, so a
20 MiB write fails inside the client ("SizeLimit") before anything reaches the network. The test
therefore writes the largest event the client can (16 MiB - 5 bytes) with the client, and a
20 MiB event with the project's own wire client exactly as Pravega's Java LargeEventWriter does
(one connection, its request ids carrying a flow id, all chunks sent before any reply is read).
The real client's reader reads all of them back whole and in order (the 20 MiB one while it
waits at the tail, woken by the merge), and the segment holds exactly the framed events,
contiguous, with no transient segment left."""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess
from tests.segmentstore.server_harness import Client, wid
from tests.support.dataplane import ClientProcess, Controller, start_with_segment_store

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

MIB = 1024 * 1024
# The largest event the Rust client serializes: an Event command (4-byte length + data) of at
# most 0xFFFFFF bytes.
CLIENT_LARGEST = wc.MAX_WIRECOMMAND_SIZE - 4
LARGE = 20 * MIB
# Java's LargeEventWriter cuts the framed event into pieces of Serializer.MAX_EVENT_SIZE.
JAVA_WRITE_SIZE = 8 * MIB
FLOW = 7  # any flow id: Java puts it in the upper 32 bits of every request id of the flow
TIMEOUT_S = 120.0
SEGMENT = "big/s/0.#epoch.0"


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


def payload(seed: bytes, size: int) -> bytes:
    return (hashlib.sha256(seed).digest() * (size // 32 + 1))[:size]


def describe(data: bytes) -> dict[str, object]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def framed(data: bytes) -> bytes:
    return struct.pack(">ii", 0, len(data)) + data


async def java_large_event(client: Client, parent: str, data: bytes) -> None:
    """Pravega's Java LargeEventWriter.write, frame for frame."""
    sequence = iter(range(1, 1 << 31))

    def request_id() -> int:
        return (FLOW << 32) | next(sequence)

    writer = wid()
    created = await client.expect(
        wc.CreateTransientSegment(request_id(), writer, parent, ""), wc.SegmentCreated
    )
    setup = await client.expect(wc.SetupAppend(request_id(), writer, created.segment, ""), wc.AppendSetup)
    assert setup.last_event_number == wc.NULL_ATTRIBUTE_VALUE
    whole = framed(data)
    ids = []
    for number, start in enumerate(range(0, len(whole), JAVA_WRITE_SIZE)):
        ids.append(request_id())
        chunk = whole[start : start + JAVA_WRITE_SIZE]
        await client.send(wc.ConditionalBlockEnd(writer, number, start, chunk, ids[-1]))
    for number, expected_id in enumerate(ids):
        reply = await client.recv()
        assert isinstance(reply, wc.DataAppended), reply
        assert (reply.request_id, reply.event_number) == (expected_id, number)
    merge_id = request_id()
    merged = await client.expect(wc.MergeSegments(merge_id, parent, created.segment, ""), wc.SegmentsMerged)
    assert merged.request_id == merge_id and (merged.target, merged.source) == (parent, created.segment)
    gone = await client.call(wc.GetStreamSegmentInfo(request_id(), created.segment, ""))
    assert isinstance(gone, wc.NoSuchSegment), gone


async def test_events_over_8_mib_round_trip_through_the_real_client(
    served: ServedProcess, tmp_path: Path, db_url: str
) -> None:
    controller = Controller(served)
    try:
        await controller.create_stream("big", "s", 1)
    finally:
        controller.close()
    worker = await ClientProcess.start(
        "large", tmp_path, uri=served.grpc_uri, scope="big", stream="s", group="rg",
        large_bytes=CLIENT_LARGEST, refused_bytes=LARGE, expect=4, deadline_s=TIMEOUT_S,
    )  # fmt: skip
    client_events = [b"before|small", payload(b"seed", CLIENT_LARGEST), b"after|small"]
    progress = await worker.until(lambda p: "written" in p, TIMEOUT_S)
    assert progress["written"] == [describe(e) for e in client_events]
    # The client's own limit, not the store's: the 20 MiB event never left the client.
    assert "SizeLimit" in progress["refused"], progress
    # The reader has the client's three events and now waits at the segment's tail.
    await worker.until(lambda p: p.get("read_count", 0) >= len(client_events), TIMEOUT_S)

    java_event = payload(b"java", LARGE)
    assert served.segment_store_port is not None
    client = await Client.connect(("127.0.0.1", served.segment_store_port))
    try:
        started = time.monotonic()
        await java_large_event(client, SEGMENT, java_event)
        java_s = time.monotonic() - started
        result = await worker.result(TIMEOUT_S)
        everything = [*client_events, java_event]
        assert result["read"] == [describe(e) for e in everything]
        # Figures for the note (pytest -s shows them).
        print(
            f"large events: client write of 16 MiB - 5 B with two small events {progress['write_s']:.2f} s; "
            f"Java-style 20 MiB write {java_s:.2f} s; reader, from its start to its fourth event "
            f"(the Java-style write included) {result['read_s']:.2f} s"
        )
        # What the store holds: the framed events back to back, nothing else.
        info = await client.info(SEGMENT)
        stored = bytearray()
        while len(stored) < info.write_offset:
            read = await client.read(SEGMENT, len(stored), 2 * MIB)
            assert isinstance(read, wc.SegmentRead), read
            stored += read.data
        assert bytes(stored) == b"".join(map(framed, everything))
    finally:
        await client.close()
    # Both transient segments were merged away (the client's has a name the test cannot know).
    db = await asyncpg.connect(db_url)
    try:
        left = await db.fetchval("SELECT count(*) FROM embedded_segments WHERE name LIKE '%#transient.%'")
        assert left == 0
    finally:
        await db.close()
