"""With TLS on and `--segment-store-host localhost`, the embedded segment store publishes the name
it was given, as Pravega's segment store publishes `pravegaservice.service.published.host.nameOrIp`,
not the address it resolved to. Its certificate, like Pravega's own test certificate, names hosts
only (`localhost`, `server.pravegastack.io`) and no IP address, so every connection by the resolved
`127.0.0.1` would fail its verification ("IP address mismatch"): getURI answers `localhost`, the
controller's own segment-store calls (createStream) succeed, and the real `pravega` client creates,
writes and reads over TLS. The same holds for the children of `serve --processes 2` and for a
`segment-store` process, which registers under the name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.security.certs import CertFiles, make_dev_certs
from app.security.tls import trusting
from app.segmentstore.client.connections import Connection
from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess
from tests.support.client import run_client
from tests.support.dataplane import (
    ClientProcess,
    check_exactly_once_in_key_order,
    read_events,
    start_with_segment_store,
)
from tests.support.stores import start_store

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

EVENTS = 200
KEYS = 4


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_dev_certs(tmp_path / "certs", names=("localhost", "server.pravegastack.io"), loopback=False)


def store_flags(certs: CertFiles) -> tuple[str, ...]:
    """The flags of a TLS segment store given the host name `localhost`."""
    return (
        "--tls-enabled",
        "--tls-cert-file", str(certs.server_cert),
        "--tls-key-file", str(certs.server_key),
        "--segment-store-host", "localhost",
    )  # fmt: skip


async def start(tmp_path: Path, db_url: str, certs: CertFiles, *args: str) -> ServedProcess:
    # `serve` also trusts the CA: its controller verifies the store it calls.
    trust = ("--tls-trust-file", str(certs.ca_cert))
    return await start_with_segment_store(tmp_path, "--db-url", db_url, *store_flags(certs), *trust, *args)


@pytest.fixture
async def served(db_url: str, tmp_path: Path, certs: CertFiles) -> AsyncIterator[ServedProcess]:
    instance = await start(tmp_path, db_url, certs)
    try:
        yield instance
    finally:
        assert await instance.stop() == 0, instance.log()


def assert_quiet(served: ServedProcess) -> None:
    log = served.log()
    for bad in ("Traceback", "CERTIFICATE_VERIFY_FAILED", " ERROR "):
        assert bad not in log, log[-3000:]


async def create_stream_and_locate(served: ServedProcess, certs: CertFiles) -> pb.NodeUri:
    """createScope and createStream over TLS (the controller creates the segments in its store over
    TLS), then getURI of the stream's first segment."""
    channel = Channel("localhost", served.grpc_port, ssl=trusting(certs.ca_cert, alpn=("h2",)))
    try:
        stub = ControllerServiceStub(channel)
        assert (await stub.createScope(pb.ScopeInfo(scope="tls"), timeout=10)).status == (
            pb.CreateScopeStatus.SUCCESS
        )
        config = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="tls", stream="st"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=2),
        )
        made = await stub.createStream(config, timeout=30)
        assert made.status == pb.CreateStreamStatus.SUCCESS, made
        segment = pb.SegmentId(streamInfo=pb.StreamInfo(scope="tls", stream="st"), segmentId=0)
        return await stub.getURI(segment, timeout=10)
    finally:
        channel.close()


async def segment_info(host: str, port: int, certs: CertFiles) -> wc.Command:
    connection = await Connection.open(HostAddress(host, port), 10, trusting(certs.ca_cert))
    try:
        return await connection.request(wc.GetStreamSegmentInfo(7, "tls/none/0.#epoch.0", ""), 10)
    finally:
        connection.close()
        await connection.wait_closed()


async def test_the_store_publishes_the_host_name_it_was_given(
    served: ServedProcess, certs: CertFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = await create_stream_and_locate(served, certs)
    assert (uri.endpoint, uri.port) == ("localhost", served.segment_store_port)
    # The certificate carries no IP address: by the name it verifies, by the address it cannot.
    assert served.segment_store_port is not None
    assert isinstance(await segment_info("localhost", served.segment_store_port, certs), wc.NoSuchSegment)
    with pytest.raises(StoreUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        await segment_info("127.0.0.1", served.segment_store_port, certs)

    # The real client: the controller by name, the store by the name getURI answers.
    client_uri = f"tls://localhost:{served.grpc_port}"
    monkeypatch.setenv("pravega_client_tls_cert_path", str(certs.ca_cert))
    made = await run_client(client_uri, 'result = {"stream": manager.create_stream("tls", "events", 2)}')
    assert made == {"stream": True}
    writer = await ClientProcess.start(
        "write", tmp_path, uri=client_uri, scope="tls", stream="events", count=EVENTS, keys=KEYS,
        progress_every=100,
    )  # fmt: skip
    assert (await writer.result(120))["written"] == EVENTS
    out = tmp_path / "read.json"
    reader = await ClientProcess.start(
        "read", tmp_path, uri=client_uri, scope="tls", stream="events", group="rg", readers=1,
        deadline_s=120, out=str(out), stop_after=EVENTS, until_end=False,
    )  # fmt: skip
    assert (await reader.result(150))["read"] == EVENTS
    check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
    assert_quiet(served)


async def test_every_child_of_processes_publishes_the_host_name(
    db_url: str, tmp_path: Path, certs: CertFiles
) -> None:
    instance = await start(tmp_path, db_url, certs, "--processes", "2")
    try:
        uri = await create_stream_and_locate(instance, certs)
        assert (uri.endpoint, uri.port) == ("localhost", instance.segment_store_port)
        assert_quiet(instance)
    finally:
        assert await instance.stop() == 0, instance.log()


async def test_a_segment_store_process_registers_the_host_name(
    served: ServedProcess, db_url: str, tmp_path: Path, certs: CertFiles, pool: Any
) -> None:
    store = await start_store(tmp_path, "named-store", db_url, *store_flags(certs))
    try:
        rows = await pool.fetch("SELECT host FROM segment_store_hosts WHERE port = $1", store.port)
        assert [r["host"] for r in rows] == ["localhost"]
        # Until the leader gives it containers it answers WrongHost: an answer over TLS, by the name.
        assert isinstance(
            await segment_info("localhost", store.port, certs), (wc.NoSuchSegment, wc.WrongHost)
        )
    finally:
        assert await store.stop() == 0, store.log()
    assert "Traceback" not in store.log() and "CERTIFICATE_VERIFY_FAILED" not in store.log()
