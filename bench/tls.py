"""What TLS costs per RPC: getCurrentSegments on one `pgcontroller serve` without TLS and one
with it, on the same database in the same run, on a reused channel (one call at a time, and
`--in-flight` at once) and on a new connection per call (connect + handshake + call).

    .venv/bin/python bench/tls.py [--seconds 10] [--in-flight 32] [--rounds 2]

Plain and TLS alternate for `--rounds` rounds so that drift of the machine hits both alike; the
load generator is this process (grpclib), so the client's share is the same for both.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.security.certs import CertFiles, make_dev_certs
from app.security.tls import trusting
from app.testing.served import ServedProcess, start_served
from bench._common import LoadResult, closed_loop, throwaway_database

INFO = pb.StreamInfo(scope="bench", stream="s")
Metadata = dict[str, str] | None


def tls_flags(certs: CertFiles) -> tuple[str, ...]:
    """`serve`'s flags for TLS on every port with the dev certificates."""
    return (
        "--tls-enabled",
        "--tls-cert-file", str(certs.server_cert),
        "--tls-key-file", str(certs.server_key),
        "--tls-trust-file", str(certs.ca_cert),
    )  # fmt: skip


async def new_connection_calls(
    name: str, port: int, context: ssl.SSLContext | None, seconds: float, metadata: Metadata = None
) -> LoadResult:
    """One call at a time, each on a channel of its own (so each pays the connection setup)."""
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        began = time.perf_counter()
        channel = Channel("localhost", port, ssl=context)
        try:
            await ControllerServiceStub(channel).getCurrentSegments(INFO, metadata=metadata)
        finally:
            channel.close()
        latencies.append((time.perf_counter() - began) * 1000)
    return LoadResult(name, len(latencies), seconds, latencies)


async def measure(
    served: ServedProcess,
    label: str,
    context: ssl.SSLContext | None,
    seconds: float,
    in_flight: int,
    metadata: Metadata = None,
) -> list[LoadResult]:
    """`metadata`: e.g. the `authorization` every call sends (bench/security.py)."""
    channel = Channel("localhost", served.grpc_port, ssl=context)
    stub = ControllerServiceStub(channel)
    call: Callable[[], Awaitable[object]] = lambda: stub.getCurrentSegments(INFO, metadata=metadata)  # noqa: E731
    try:
        one = await closed_loop(f"{label} reused channel, 1 in flight", call, 1, seconds)
        many = await closed_loop(f"{label} reused channel, {in_flight} in flight", call, in_flight, seconds)
    finally:
        channel.close()
    fresh = await new_connection_calls(
        f"{label} new connection per call", served.grpc_port, context, seconds, metadata
    )
    return [one, many, fresh]


def print_best(
    results: dict[str, list[LoadResult]], base: str, other: str, in_flight: int, heading: str, width: int
) -> None:
    """The best round of each measurement `measure` named, then `other` against `base` for each
    of its three kinds of call, each line opened by `heading` (the kind padded to `width`)."""
    best = {name: max(runs, key=lambda r: r.throughput) for name, runs in results.items()}
    for result in best.values():
        print(result.line())
    for kind in (
        "reused channel, 1 in flight",
        f"reused channel, {in_flight} in flight",
        "new connection per call",
    ):
        was, now = best[f"{base} {kind}"], best[f"{other} {kind}"]
        print(
            f"{heading} {kind:<{width}} p50 {now.percentile(0.5) - was.percentile(0.5):+6.2f} ms, "
            f"throughput {now.throughput / was.throughput:6.1%}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    results: dict[str, list[LoadResult]] = {}
    async with throwaway_database() as url:
        with tempfile.TemporaryDirectory() as work:
            certs = make_dev_certs(Path(work) / "certs")
            with_tls = tls_flags(certs)
            client_tls = trusting(certs.ca_cert, alpn=("h2",))
            for round_ in range(args.rounds):
                for label, flags, context in (("plain", (), None), ("TLS", with_tls, client_tls)):
                    served = await start_served(Path(work), "--db-url", url, *flags)
                    try:
                        if round_ == 0 and label == "plain":
                            channel = Channel("localhost", served.grpc_port)
                            stub = ControllerServiceStub(channel)
                            await stub.createScope(pb.ScopeInfo(scope="bench"))
                            made = await stub.createStream(
                                pb.StreamConfig(
                                    streamInfo=INFO, scalingPolicy=pb.ScalingPolicy(minNumSegments=10)
                                )
                            )
                            assert made.status == pb.CreateStreamStatus.SUCCESS, made
                            channel.close()
                        for result in await measure(served, label, context, args.seconds, args.in_flight):
                            results.setdefault(result.name, []).append(result)
                    finally:
                        await served.stop()

    print(
        f"getCurrentSegments (10 segments), {args.rounds} rounds of {args.seconds:g} s each, best round shown"
    )
    print_best(results, "plain", "TLS", args.in_flight, "TLS vs plain,", 32)


if __name__ == "__main__":
    asyncio.run(main())
