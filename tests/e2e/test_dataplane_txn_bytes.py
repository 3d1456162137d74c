"""Transactions and byte streams of the real Pravega Python client against `serve` alone: a
committed transaction appears whole, in order, after everything written before its commit, an
aborted one never, and neither leaves a transaction segment behind, also when the commit has to
roll because a scale sealed the transaction's epoch; a byte stream is written, read back, sought
and truncated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.testing.served import ServedProcess
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    read_events,
    start_with_segment_store,
    wait_txn_state,
)

# Above the sum of the deadlines inside, which fail a test with what the client saw.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(400)]

TXN_EVENTS = 10
BEFORE, AFTER = 50, 50
BYTES = 100_000


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


async def _segments(db_url: str, scope: str) -> dict[str, int]:
    """Every segment of the scope the store holds, with its length."""
    connection = await asyncpg.connect(db_url)
    try:
        rows = await connection.fetch(
            "SELECT name, length FROM embedded_segments WHERE name LIKE $1", f"{scope}/%"
        )
    finally:
        await connection.close()
    return {row["name"]: row["length"] for row in rows}


async def test_a_committed_transaction_appears_whole_and_an_aborted_one_never(
    served: ServedProcess, db_url: str, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        # Segment 1 is split before the transactions begin, so they belong to epoch 1 while
        # their routing key stays on segment 0 of epoch 0: the client names its transaction
        # segment after the parent's id in the transaction's epoch (0.#epoch.1#transaction...),
        # which must be the name the controller created and then merges into 0.#epoch.0.
        info = await controller.create_stream("tx", "s", 2)
        await controller.scale(info, [1], [(0.5, 0.75), (0.75, 1.0)])
        txn = await ClientProcess.start(
            "txn", tmp_path, uri=served.grpc_uri, scope="tx", stream="s", before=BEFORE, size=TXN_EVENTS,
            after=AFTER,
        )  # fmt: skip
        done = await txn.result(120)
        await wait_txn_state(controller, info, int(done["committed"]), pb.TxnState.COMMITTED)
        await wait_txn_state(controller, info, int(done["aborted"]), pb.TxnState.ABORTED)
        await controller.seal(info)
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="tx", stream="s", group="rg", readers=1,
            deadline_s=90, out=str(out),
        )  # fmt: skip
        seen = await reader.result(120)
    finally:
        controller.close()
    assert seen["ended"] is True, seen
    names = [name for _, name in read_events(out)]
    plain = [f"n:{i:04d}" for i in range(BEFORE + TXN_EVENTS + AFTER)]
    committed = [f"c:{i:04d}" for i in range(TXN_EVENTS)]
    # Every plain event was acknowledged before commit(): the merge lands after all of them,
    # as one block in write order; nothing of the aborted transaction is ever visible.
    assert names == plain + committed, names
    segments = await _segments(db_url, "tx")
    # All of it went to the epoch-0 segment (the routing key's hash is the client's; were it
    # to move, this test would no longer cover a parent older than its transaction's epoch).
    written = {name for name, length in segments.items() if name.startswith("tx/s/") and length > 0}
    assert written == {"tx/s/0.#epoch.0"}, segments
    # The merge deleted the committed transaction's segment, the abort the other one.
    assert not [name for name in segments if "#transaction." in name], segments


async def test_a_transaction_outliving_its_epoch_commits_by_rolling(
    served: ServedProcess, db_url: str, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        info = await controller.create_stream("roll", "s", 1)
        go = tmp_path / "commit-now"
        txn = await ClientProcess.start(
            "txn-held", tmp_path, uri=served.grpc_uri, scope="roll", stream="s", size=TXN_EVENTS,
            before=BEFORE, go=str(go), deadline_s=60,
        )  # fmt: skip
        opened = await txn.until(lambda p: "txn" in p, 60)
        # The transaction's epoch-0 segment is sealed by this scale: its commit cannot merge in
        # place and rolls (copies of epoch 0 then of epoch 1, the transaction merged into the first).
        await controller.scale(info, [0], [(0.0, 1.0)])
        go.touch()
        done = await txn.result(60)
        assert done["committed"] == opened["txn"]
        await wait_txn_state(controller, info, int(done["committed"]), pb.TxnState.COMMITTED)
        await controller.seal(info)
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=served.grpc_uri, scope="roll", stream="s", group="rg", readers=1,
            deadline_s=90, out=str(out),
        )  # fmt: skip
        seen = await reader.result(120)
    finally:
        controller.close()
    assert seen["ended"] is True, seen
    names = [name for _, name in read_events(out)]
    # The rolled copy of the transaction's epoch comes after the segments of the scale's epoch:
    # the transaction is read after every plain event, whole and in order.
    assert names == [f"n:{i:04d}" for i in range(BEFORE)] + [f"c:{i:04d}" for i in range(TXN_EVENTS)], names
    segments = await _segments(db_url, "roll")
    assert segments.get("roll/s/0.#epoch.2", 0) > 0, segments
    assert not [name for name in segments if "#transaction." in name], segments


async def test_a_byte_stream_is_written_read_sought_and_truncated(
    served: ServedProcess, tmp_path: Path
) -> None:
    controller = Controller(served)
    try:
        await controller.create_stream("bytes", "s", 1)
    finally:
        controller.close()
    worker = await ClientProcess.start(
        "bytes", tmp_path, uri=served.grpc_uri, scope="bytes", stream="s", size=BYTES, middle=40_000,
        truncate_at=30_000, deadline_s=60,
    )  # fmt: skip
    seen = await worker.result(120)
    assert seen["written"] == BYTES and seen["tail"] == BYTES, seen
    assert seen["whole_ok"] is True and seen["tell_after_whole"] == BYTES, seen
    assert seen["seek_middle"] == 40_000 and seen["middle_ok"] is True, seen
    assert seen["seek_back_relative"] == 40_050 and seen["relative_ok"] is True, seen
    assert seen["seek_end"] == BYTES, seen
    assert seen["head_after_truncate"] == 30_000 and seen["tail_after_truncate"] == BYTES, seen
    assert seen["after_cut_ok"] is True, seen
    # Below the truncation point the store answers SegmentIsTruncated: an error, not bytes.
    assert "error" in seen["below_cut"], seen
