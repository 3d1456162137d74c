"""The real `pravega` client (0.3.8) with TLS on: given a `tls://` controller URI and the CA
in its documented `pravega_client_tls_cert_path`, it creates a stream, writes events and reads
them back through a TLS-only `serve` and its TLS-only embedded segment store; trusting another CA
it gets nowhere.

The client's rustls takes the segment store's host from getURI as a DNS name (an IP address
panics it), so the store binds every IPv4 interface and is advertised as `localhost`, as Pravega's
docs ask of a TLS segment store (a published host name, not an IP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.security.certs import CertFiles, make_dev_certs
from app.testing.served import ServedProcess
from tests.support.client import run_client
from tests.support.dataplane import (
    ClientProcess,
    check_exactly_once_in_key_order,
    read_events,
)
from tests.support.tls_served import served_with_tls

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

EVENTS = 2_000
KEYS = 10


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_dev_certs(tmp_path / "certs")


@pytest.fixture
async def served(db_url: str, tmp_path: Path, certs: CertFiles) -> AsyncIterator[ServedProcess]:
    async with served_with_tls(tmp_path, certs, "--db-url", db_url) as instance:
        yield instance


async def test_the_real_client_creates_writes_and_reads_over_tls(
    served: ServedProcess, tmp_path: Path, certs: CertFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"tls://localhost:{served.grpc_port}"
    # The client processes inherit it: the Rust client's ClientConfig reads its trust store here.
    monkeypatch.setenv("pravega_client_tls_cert_path", str(certs.ca_cert))
    made = await run_client(
        uri,
        """
        result = {
            "scope": manager.create_scope("tls"),
            "stream": manager.create_stream("tls", "st", 2),
        }
        """,
    )
    assert made == {"scope": True, "stream": True}
    writer = await ClientProcess.start(
        "write", tmp_path, uri=uri, scope="tls", stream="st", count=EVENTS, keys=KEYS, progress_every=500
    )
    assert (await writer.result(120))["written"] == EVENTS
    out = tmp_path / "read.json"
    reader = await ClientProcess.start(
        "read", tmp_path, uri=uri, scope="tls", stream="st", group="rg", readers=1, deadline_s=120,
        out=str(out), stop_after=EVENTS, until_end=False,
    )  # fmt: skip
    assert (await reader.result(150))["read"] == EVENTS
    check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
    log = served.log()
    assert "Traceback" not in log, log[-3000:]


async def test_the_real_client_trusting_another_ca_gets_nowhere(
    served: ServedProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_dev_certs(tmp_path / "other")
    monkeypatch.setenv("pravega_client_tls_cert_path", str(other.ca_cert))
    with pytest.raises(AssertionError, match=r"did not finish|client script failed"):
        await run_client(
            f"tls://localhost:{served.grpc_port}",
            'result = {"scope": manager.create_scope("nope")}',
            timeout_s=20,
        )
