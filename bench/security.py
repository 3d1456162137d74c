"""The cost of security per RPC: getCurrentSegments on two `pgcontroller serve` processes over the
same database in the same run, one with authentication and TLS off and one with both on
(`--auth-enabled --tls-enabled`: TLS, Basic credentials from the cache, the ACL check, and the
delegation token signed for the caller, as the Rust client's UNSPECIFIED access asks), measured in
alternating rounds so drift of the machine hits both alike.

    .venv/bin/python bench/security.py [--seconds 5] [--in-flight 32] [--rounds 2] [--no-h2load]

The load comes from h2load (nghttp2-client) when it is installed: one connection, `--in-flight`
streams at once, the gRPC request body from a file; it cannot read headers from a file, so the
bench account's password (random, made for this run, in a throwaway database) is in its argv.
Every run is also measured with this process's grpclib client (bench/tls.py's loops).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.api.grpc.service import SERVICE_NAME
from app.security.certs import make_dev_certs
from app.security.passwords import hash_password
from app.security.tls import trusting
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess, start_served
from bench._common import LoadResult, create_fixed_stream, throwaway_database
from bench._h2load import grpc_body, run_h2load
from bench.auth import basic
from bench.tls import INFO, Metadata, measure, print_best, tls_flags

SEGMENTS = 10
# A realistic ACL: the matching entry is not the first.
ACL = "prn::/scope:other,READ;prn::/scope:other/*,READ;prn::/scope:bench,READ;prn::/scope:bench/*,READ_UPDATE"


@dataclass
class H2Result:
    name: str
    requests: int
    rate: float
    mean_ms: float
    data_bytes: int

    def line(self) -> str:
        return f"{self.name:<42} {self.rate:>9.0f} req/s  mean {self.mean_ms:6.2f} ms  (n={self.requests})"


async def h2load(
    name: str, url: str, body: Path, requests: int, in_flight: int, metadata: Metadata
) -> H2Result:
    # Each answer of 10 segment ranges is a DATA frame of some 350 bytes, an error none.
    run = await run_h2load(url, body, requests, in_flight, 300, metadata)
    return H2Result(name, run.requests, run.rate, run.mean_ms, run.data_bytes)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--h2load-requests", type=int, default=20_000)
    parser.add_argument("--no-h2load", action="store_true")
    args = parser.parse_args()
    use_h2load = not args.no_h2load and shutil.which("h2load") is not None

    grpclib_results: dict[str, list[LoadResult]] = {}
    h2_results: dict[str, list[H2Result]] = {}
    async with throwaway_database() as url:
        password = secrets.token_urlsafe(24)
        pool = await create_pool(url, min_size=1, max_size=1)
        try:
            await PgAccountStore(pool).add("bench", hash_password(password), ACL, 0)
        finally:
            await pool.close()
        with tempfile.TemporaryDirectory() as work:
            certs = make_dev_certs(Path(work) / "certs")
            (Path(work) / "off").mkdir()
            (Path(work) / "on").mkdir()
            off = await start_served(Path(work) / "off", "--db-url", url)
            on = await start_served(Path(work) / "on", "--db-url", url, "--auth-enabled", *tls_flags(certs))
            try:
                channel = Channel("localhost", off.grpc_port)
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope="bench"))
                await create_fixed_stream(stub, INFO, SEGMENTS)
                channel.close()
                client_tls = trusting(certs.ca_cert, alpn=("h2",))
                auth = {"authorization": basic("bench", password)}
                # The call works, and carries a token, with the credentials (else the figures lie).
                channel = Channel("localhost", on.grpc_port, ssl=client_tls)
                answer = await ControllerServiceStub(channel).getCurrentSegments(INFO, metadata=auth)
                channel.close()
                assert len(answer.segmentRanges) == SEGMENTS and answer.delegationToken, answer
                body = Path(work) / "request.bin"
                body.write_bytes(grpc_body(INFO.SerializeToString()))
                path = f"/{SERVICE_NAME}/getCurrentSegments"
                sides: tuple[tuple[str, ServedProcess, str, Metadata], ...] = (
                    ("off", off, f"http://localhost:{off.grpc_port}{path}", None),
                    ("on ", on, f"https://localhost:{on.grpc_port}{path}", auth),
                )
                for _ in range(args.rounds):
                    for label, served, h2_url, metadata in sides:
                        context = client_tls if served is on else None
                        name = f"auth+TLS {label.strip()}"
                        for result in await measure(
                            served, name, context, args.seconds, args.in_flight, metadata
                        ):
                            grpclib_results.setdefault(result.name, []).append(result)
                        if use_h2load:
                            h2 = await h2load(
                                f"{name} h2load, {args.in_flight} in flight",
                                h2_url, body, args.h2load_requests, args.in_flight, metadata,
                            )  # fmt: skip
                            h2_results.setdefault(h2.name, []).append(h2)
            finally:
                await on.stop()
                await off.stop()
    report(args, grpclib_results, h2_results)


def report(
    args: argparse.Namespace,
    grpclib_results: dict[str, list[LoadResult]],
    h2_results: dict[str, list[H2Result]],
) -> None:
    print(
        f"getCurrentSegments ({SEGMENTS} segments), auth+TLS off vs on, {args.rounds} alternating rounds, "
        "best round shown"
    )
    print_best(grpclib_results, "auth+TLS off", "auth+TLS on", args.in_flight, "on vs off, grpclib", 28)
    if not h2_results:
        print("h2load: not installed (apt-get install nghttp2-client) or --no-h2load")
        return
    h2_best = {name: max(runs, key=lambda r: r.rate) for name, runs in h2_results.items()}
    for h2 in h2_best.values():
        print(h2.line())
    h2_off, h2_on = (h2_best[f"auth+TLS {side} h2load, {args.in_flight} in flight"] for side in ("off", "on"))
    print(
        f"on vs off, h2load {args.in_flight} in flight: "
        f"mean {h2_on.mean_ms - h2_off.mean_ms:+6.2f} ms per call, "
        f"{1000 / h2_on.rate - 1000 / h2_off.rate:+.3f} ms of server time per call, "
        f"throughput {h2_on.rate / h2_off.rate:6.1%}"
    )


if __name__ == "__main__":
    asyncio.run(main())
