"""Auto-scaling from real traffic: the real Pravega Python client writes to a stream with a rate
policy through `serve`'s embedded segment store; the store measures the appends, reports the hot
segment, and the controller splits it; once the writer stops, the idle halves report and are
merged again; a stream written only through transactions splits from its merges. Nobody asks
for a scale: every epoch here comes from the store's reports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.testing.served import ServedProcess
from tests.support.autoscale import (
    FAST_AUTOSCALE_FLAGS,
    create_rate_stream,
    current,
    epoch_of,
    wait_for_segments,
)
from tests.support.dataplane import ClientProcess, Controller, start_with_segment_store

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

# 200 events/s against a target of 10 per segment: far above the 5x that splits on the short
# average; the scale factor caps the split at two pieces.
WRITE_RATE = 200
TARGET = 10
WAIT_S = 60.0


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_with_segment_store(tmp_path, "--db-url", db_url, *FAST_AUTOSCALE_FLAGS)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


@pytest.mark.parametrize(
    ("scale_type", "target", "size"),
    [
        (pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC, TARGET, 100),
        # 200 events of 1 KiB a second against 10 KiB/s.
        (pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC, TARGET, 1024),
    ],
    ids=["events", "kbytes"],
)
async def test_a_rate_policy_scales_up_under_load_and_down_when_the_load_stops(
    served: ServedProcess, tmp_path: Path, scale_type: int, target: int, size: int
) -> None:
    controller = Controller(served)
    stub = controller.stub
    try:
        info = await create_rate_stream(stub, "auto", "s", scale_type=scale_type, target_rate=target)
        assert await current(stub, info) == [(0, 0.0, 1.0)]
        writer = await ClientProcess.start(
            "write", tmp_path, uri=served.grpc_uri, scope="auto", stream="s", count=WRITE_RATE * 120,
            keys=16, size=size, inflight=1000, progress_every=100, rate=WRITE_RATE,
        )  # fmt: skip
        try:
            await writer.until(lambda p: p["acked"] >= 100, WAIT_S)
            split, _ = await wait_for_segments(stub, info, lambda s: len(s) > 1, WAIT_S, "no split")
        finally:
            # The load stops as soon as the split is seen: the new segments are still muted.
            await writer.kill()
        assert [(low, high) for _, low, high in split] == [(0.0, 0.5), (0.5, 1.0)], split
        assert {epoch_of(s) for s, _, _ in split} == {1}

        # Idle past the expiry, each half sends a silent DOWN; the second one merges them.
        merged, _ = await wait_for_segments(stub, info, lambda s: len(s) == 1, WAIT_S, "no merge")
        assert [(epoch_of(s), low, high) for s, low, high in merged] == [(2, 0.0, 1.0)], merged
    finally:
        controller.close()


async def test_committed_transactions_count_as_the_streams_traffic(
    served: ServedProcess, tmp_path: Path
) -> None:
    """Transactions' events reach the stream only by merges: the store counts each merged
    transaction for the parent segment (spread over its life, as Pravega does), so a stream
    written only through transactions splits too."""
    controller = Controller(served)
    stub = controller.stub
    try:
        info = await create_rate_stream(stub, "auto", "t", target_rate=1)
        writer = await ClientProcess.start(
            "txn-load", tmp_path, uri=served.grpc_uri, scope="auto", stream="t", size=20, event_size=100,
            seconds=WAIT_S,
        )  # fmt: skip
        try:
            split, _ = await wait_for_segments(stub, info, lambda s: len(s) > 1, WAIT_S, "no split")
        finally:
            await writer.kill()
        assert [(epoch_of(s), low, high) for s, low, high in split] == [(1, 0.0, 0.5), (1, 0.5, 1.0)]
    finally:
        controller.close()
