"""Transactions through the real Pravega Python client against a served pgcontroller.

`create_transaction_writer`, `begin_txn`, `is_open`, `commit` and `abort`, with no events
written (the calls the client makes of a controller), then the resulting state read back over gRPC.

There is no segment store behind the served instance: `getURI` points at a port that is
bound but not listening, so every connection is refused and the client's background
SetupAppend for each txn segment keeps retrying in its own task. With no events written,
`commit()` has no append to wait for and goes straight to `commitTransaction`; it does not
wait for the commit either (caveat 3), so `is_open()` right after it may see COMMITTING.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess, start_served
from tests.support.client import run_client
from tests.support.client_scenarios import SCENARIOS

pytestmark = pytest.mark.interop

SETTLE_S = 20.0  # how long the commit/abort workers get to finish a committed/aborted txn
CLIENT_TIMEOUT_S = 100.0  # above the client's ~61 s retry loop, so a retried call fails, not hangs


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port held bound without listening: connecting to it is always refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
async def served(db_url: str, tmp_path: Path, refused_port: int) -> AsyncIterator[ServedProcess]:
    instance = await start_served(
        tmp_path, "--db-url", db_url, "--segment-store-hosts", f"127.0.0.1:{refused_port}"
    )
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


def to_proto_id(txn_id: int) -> pb.TxnId:
    """The client's unsigned 128-bit id as Pravega's two signed 64-bit halves."""
    assert 0 <= txn_id < 1 << 128

    def signed(half: int) -> int:
        return half - (1 << 64) if half >= 1 << 63 else half

    return pb.TxnId(highBits=signed(txn_id >> 64), lowBits=signed(txn_id & ((1 << 64) - 1)))


async def wait_state(
    stub: ControllerServiceStub, info: pb.StreamInfo, txn: pb.TxnId, want: int
) -> tuple[int, float]:
    """Polls checkTransactionState until it answers `want` or SETTLE_S passes; returns the
    last state seen and the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        state = (await stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=txn))).state
        if state == want or loop.time() - start > SETTLE_S:
            return state, loop.time() - start
        await asyncio.sleep(0.1)


async def test_commit_and_abort_through_the_python_client(served: ServedProcess) -> None:
    started = time.monotonic()
    result = await run_client(served.grpc_uri, SCENARIOS["commit_and_abort"], timeout_s=CLIENT_TIMEOUT_S)
    client_s = time.monotonic() - started

    assert result["open_before_commit"] is True
    assert result["open_before_abort"] is True
    # commit()/abort() return on SUCCESS without waiting for the workers (caveat 3): the txn
    # is COMMITTING/COMMITTED (ABORTING/ABORTED), which is_open() reads as False either way.
    assert result["open_after_commit"] is False
    assert result["open_after_abort"] is False
    # A closed txn object refuses a second commit/abort on its own, without an RPC.
    assert "TxnFailed" in result["closed_commit_again"].get("error", "")
    assert "TxnFailed" in result["closed_abort_again"].get("error", "")

    committed_id, aborted_id = int(result["committed_id"]), int(result["aborted_id"])
    committed, aborted = to_proto_id(committed_id), to_proto_id(aborted_id)
    assert committed != aborted
    # Caveat 4: lowBits must be non-negative, or the client sign-extends it into highBits.
    assert committed.lowBits >= 0 and aborted.lowBits >= 0
    # Both began in the stream's first epoch (the epoch is the top 32 bits of highBits).
    assert committed.highBits >> 32 == 0 and aborted.highBits >> 32 == 0

    info = pb.StreamInfo(scope="txs", stream="s")
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        commit_state, commit_wait_s = await wait_state(stub, info, committed, pb.TxnState.COMMITTED)
        abort_state, abort_wait_s = await wait_state(stub, info, aborted, pb.TxnState.ABORTED)
        assert pb.TxnState.State.Name(commit_state) == "COMMITTED", served.log()[-3000:]
        assert pb.TxnState.State.Name(abort_state) == "ABORTED", served.log()[-3000:]

        listed = await stub.listCompletedTransactions(pb.ListCompletedTxnRequest(streamInfo=info))
        completed = {(r.txnId.highBits, r.txnId.lowBits): r.status for r in listed.response}
        assert completed == {
            (committed.highBits, committed.lowBits): pb.TxnResponse.COMMITTED,
            (aborted.highBits, aborted.lowBits): pb.TxnResponse.ABORTED,
        }

        # The txn began in the active epoch, so its commit merged into that epoch's segments
        # without a rolling transaction: the stream still has its two epoch-0 segments.
        segments = await stub.getCurrentSegments(info)
        assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in segments.segmentRanges] == [
            (0, 0.0, 0.5),
            (1, 0.5, 1.0),
        ]
    finally:
        channel.close()

    timings = result["seconds"]
    print(
        f"client {client_s:.1f}s (begin {timings['begin']}s, is_open {timings['is_open']}s, "
        f"commit {timings['commit']}s, abort {timings['abort']}s); "
        f"COMMITTED after {commit_wait_s:.2f}s, ABORTED after {abort_wait_s:.2f}s"
    )
