"""`serve` with TLS on its gRPC, REST and embedded segment store, set up as the real `pravega`
client needs it: the store bound to every IPv4 interface and advertised as `localhost`, because
the client's rustls takes the store's host from getURI as a DNS name (an IP address panics it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from app.security.certs import CertFiles
from app.testing.served import ServedProcess
from tests.support.dataplane import start_with_segment_store


@asynccontextmanager
async def served_with_tls(work_dir: Path, certs: CertFiles, *args: str) -> AsyncIterator[ServedProcess]:
    """The process with the dev certificates `certs` and further flags `args`; it must stop
    cleanly (exit 0) when the block ends."""
    instance = await start_with_segment_store(
        work_dir,
        *args,
        "--tls-enabled",
        "--tls-cert-file", str(certs.server_cert),
        "--tls-key-file", str(certs.server_key),
        "--tls-trust-file", str(certs.ca_cert),
        "--segment-store-host", "0.0.0.0",
        "--advertise-host", "localhost",
    )  # fmt: skip
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()
