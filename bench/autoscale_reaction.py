"""Auto-scale reaction time: from the moment the real Pravega client starts writing to a stream with
a rate policy until the controller's new epoch (the split the segment store's report asked for)
is what getCurrentSegments answers. A `pgcontroller serve` subprocess with its embedded segment
store, data in a throwaway embedded PostgreSQL.

    .venv/bin/python bench/autoscale_reaction.py [--runs 5] [--time-scale 0.01] [--rate 200]
        [--target 10]

Each run creates a stream (events/s policy, --target per segment, scale factor 2), waits until
its segment is older than the 2-minute window (scaled), starts one writer at --rate events/s
(20x the target by default) and polls the current segments every 10 ms. Load start is when the
writer began writing (its own CLOCK_MONOTONIC, reported with its first acknowledgement).

What the figure is made of: the store judges a segment's rates at most once per reporting
interval (Pravega's 2 minutes, 1.2 s at --time-scale 0.01), on an append; then its report is a
request row the controller's request workers take, and the scale seals one segment and creates
two. Cooldown and mute are 0 here (Pravega: 10 minutes each, counted from the segment's
creation), so the figure is the reporting interval's share plus that pipeline. At Pravega's
defaults, an established stream reacts within one to two reporting intervals, 2-4 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.autoscale import PRAVEGA_WINDOWS
from app.testing.served import start_served
from bench._common import throwaway_cluster
from tests.support.autoscale import create_rate_stream, wait_for_segments
from tests.support.dataplane import ClientProcess

SCOPE = "reaction"


async def one_run(
    stub: ControllerServiceStub, uri: str, work: Path, name: str, args: argparse.Namespace
) -> float:
    info = await create_rate_stream(stub, SCOPE, name, target_rate=args.target)
    # Past the age at which the 2-minute average is trusted: an established stream.
    await asyncio.sleep(PRAVEGA_WINDOWS.scaled(args.time_scale).two_minute_ms / 1000 + 0.2)
    writer = await ClientProcess.start(
        "write", work, uri=uri, scope=SCOPE, stream=name, count=int(args.rate * 600), keys=16,
        size=100, inflight=1000, progress_every=10, rate=args.rate,
    )  # fmt: skip
    try:
        first = await writer.until(lambda p: p["acked"] >= 10, 60)
        started = time.monotonic() - first["seconds"]
        _, seen = await wait_for_segments(stub, info, lambda s: len(s) > 1, 120, f"{name} never split")
    finally:
        await writer.kill()
    return seen - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--time-scale", type=float, default=0.01, help="the store's windows, scaled")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s of the writer")
    parser.add_argument("--target", type=int, default=10, help="events/s per segment of the policy")
    args = parser.parse_args()
    flags = (
        "--autoscale-cooldown-s", "0",
        "--autoscale-mute-s", "0",
        "--autoscale-cache-cleanup-s", "0.2",
        "--autoscale-time-scale", str(args.time_scale),
    )  # fmt: skip
    windows = PRAVEGA_WINDOWS.scaled(args.time_scale)
    async with throwaway_cluster() as cluster:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            served = await start_served(work, "--db-url", cluster.url(), *flags)
            channel = Channel("127.0.0.1", served.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                reactions = []
                for run in range(args.runs):
                    reaction = await one_run(stub, served.grpc_uri, work, f"r{run}", args)
                    reactions.append(reaction)
                    print(f"run {run}: load start -> new epoch {reaction * 1000:.0f} ms", flush=True)
            finally:
                channel.close()
                await served.stop()
    print(
        f"auto-scale reaction (time scale {args.time_scale}: tick {windows.tick_ms} ms, reporting "
        f"interval {windows.reporting_interval_ms} ms; {args.rate:.0f} events/s against {args.target}/s): "
        f"p50 {statistics.median(reactions) * 1000:.0f} ms, min {min(reactions) * 1000:.0f} ms, "
        f"max {max(reactions) * 1000:.0f} ms over {len(reactions)} runs"
    )


if __name__ == "__main__":
    asyncio.run(main())
