"""The stream client against a served cluster: transactions written and committed, events read
back in parts split at arbitrary offsets, and routing keys placed where Pravega's own client
places them."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.streamclient import (
    StreamController,
    StreamError,
    StreamSegments,
    TransactionFailed,
    TxnWriter,
    commit_all,
    head_cut,
    read_part,
    spans_between,
    tail_cut,
    wait_committed,
)
from app.streamclient.routing import SegmentRouter
from app.streamclient.txn import TXN_ABORTED, TXN_OPEN
from tests.support.dataplane import start_with_segment_store
from tests.support.spark_streams import Admin, Cluster, write_events

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def cluster(db_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    served = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield Cluster("serve", served.grpc_port)
    finally:
        assert await served.stop() == 0, served.log()[-3000:]


@pytest.fixture
async def controller(cluster: Cluster) -> AsyncIterator[StreamController]:
    client = StreamController(cluster.controller)
    try:
        yield client
    finally:
        client.close()


async def written_in_a_txn(
    controller: StreamController, scope: str, stream: str, events: list[bytes]
) -> None:
    writer = await TxnWriter.begin(controller, scope, stream, lease_ms=30_000)
    try:
        for i, event in enumerate(events):
            await writer.write(f"key-{i % 5}", event)
        await writer.flush()
        await commit_all(controller, scope, stream, [writer.txn_key], 30_000)
        await wait_committed(controller, scope, stream, [writer.txn_key], 30)
    finally:
        await writer.close()


def frames(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">ii", 0, len(p)) + p for p in payloads)


async def test_parts_split_anywhere_read_every_event_once_or_refuse(
    cluster: Cluster, controller: StreamController
) -> None:
    admin = Admin(cluster)
    try:
        for stream in ("text", "adversarial", "nested"):
            await admin.create_stream("clientsplit", stream, 1)
    finally:
        admin.close()
    rng = random.Random(7)
    # What applications write: text, JSON, no run of four zero bytes but in the headers.
    text = [
        f'{{"n": {i}, "name": "{rng.randbytes(rng.randrange(200)).hex()}"}}'.encode() for i in range(3000)
    ]
    # Payloads full of what looks like headers: zero runs, small lengths, empty events.
    adversarial = [
        rng.choice(
            [b"", bytes(rng.randrange(64)), struct.pack(">ii", 0, rng.randrange(40)) * rng.randrange(1, 4)]
        )
        + rng.randbytes(rng.randrange(300))
        for _ in range(3000)
    ]
    # Payloads that are themselves whole chains of frames: a chain from inside one lands on
    # the next true event and runs on, so only the check of the part before can tell.
    nested = [
        frames(*(rng.randbytes(rng.randrange(30)) for _ in range(rng.randrange(1, 6)))) for _ in range(2000)
    ]
    await written_in_a_txn(controller, "clientsplit", "text", text)
    await written_in_a_txn(controller, "clientsplit", "adversarial", adversarial)
    await written_in_a_txn(controller, "clientsplit", "nested", nested)

    # Text always splits; the others may be refused (never read wrong): a chain of fake headers
    # can run into the true one.
    for stream, payloads, splittable in (
        ("text", text, True),
        ("adversarial", adversarial, False),
        ("nested", nested, False),
    ):
        segments = StreamSegments(controller, "clientsplit", stream)
        try:
            (span,) = await spans_between(segments, await head_cut(segments), await tail_cut(segments))
            whole = [
                e
                async for batch in read_part(segments, 0, span.start, span.end, span.start, span.end)
                for e in batch
            ]
            assert [payload for _, payload in whole] == payloads
            refused = 0
            for parts in (2, 3, 10, 57):
                points = sorted(
                    {span.start, *(rng.randrange(span.start, span.end) for _ in range(parts - 1))}
                )
                got: list[tuple[int, bytes]] = []
                try:
                    for lo, hi in zip(points, [*points[1:], span.end], strict=True):
                        got += [
                            e
                            async for batch in read_part(segments, 0, span.start, span.end, lo, hi)
                            for e in batch
                        ]
                except StreamError as exc:
                    assert "cannot be split" in str(exc)
                    refused += 1
                    continue
                assert got == whole, f"{stream} split in {parts} parts"
            assert refused == 0 or not splittable
        finally:
            await segments.close()


async def test_routing_keys_land_where_pravegas_client_puts_them(
    cluster: Cluster, controller: StreamController, tmp_path: Path
) -> None:
    admin = Admin(cluster)
    try:
        await admin.create_stream("clientroute", "keys", 7)
    finally:
        admin.close()
    await write_events(cluster, tmp_path, "clientroute", "keys", count=700, keys=70, prefix="r")
    segments = StreamSegments(controller, "clientroute", "keys")
    try:
        ranges, _ = await controller.current_segments("clientroute", "keys")
        router = SegmentRouter(ranges)
        spans = await spans_between(segments, await head_cut(segments), await tail_cut(segments))
        placed = {}
        for span in spans:
            async for batch in read_part(
                segments, span.segment_id, span.start, span.end, span.start, span.end
            ):
                for _, event in batch:
                    key = int(event.split(b":", 1)[0][1:])
                    placed[f"k{key:03d}"] = span.segment_id
        assert len(placed) == 70
        assert {key: router.segment_for(key) for key in placed} == placed
    finally:
        await segments.close()


async def test_commit_all_commits_none_when_one_transaction_timed_out(
    cluster: Cluster, controller: StreamController
) -> None:
    admin = Admin(cluster)
    try:
        await admin.create_stream("clienttxn", "all-or-none", 2)
    finally:
        admin.close()
    kept = await TxnWriter.begin(controller, "clienttxn", "all-or-none", lease_ms=60_000)
    lapsed = await TxnWriter.begin(controller, "clienttxn", "all-or-none", lease_ms=10_000)
    try:
        for writer in (kept, lapsed):
            await writer.write("k", b"in a transaction")
            await writer.flush()
        # Nobody pings `lapsed`: the controller aborts it once its 10 s lease has run out.
        deadline = asyncio.get_running_loop().time() + 60
        while await controller.txn_state("clienttxn", "all-or-none", lapsed.txn_key) != TXN_ABORTED:
            assert asyncio.get_running_loop().time() < deadline, "the lapsed transaction was never aborted"
            await asyncio.sleep(0.5)
        with pytest.raises(TransactionFailed, match="cannot be committed: it is ABORT"):
            await commit_all(controller, "clienttxn", "all-or-none", [kept.txn_key, lapsed.txn_key], 60_000)
        assert await controller.txn_state("clienttxn", "all-or-none", kept.txn_key) == TXN_OPEN
        segments = StreamSegments(controller, "clienttxn", "all-or-none")
        try:
            assert await spans_between(segments, await head_cut(segments), await tail_cut(segments)) == []
        finally:
            await segments.close()
        await kept.abort()
    finally:
        await kept.close()
        await lapsed.close()
