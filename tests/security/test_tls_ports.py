"""TLS on the service's own ports, against real `serve` and `segment-store` processes with the
certificates of `pgcontroller dev certs`: gRPC (grpclib), REST (aiohttp) and the segment store's
wire protocol (the project's own client) complete verified handshakes; the controller reaches its
embedded store over TLS (a stream's segments are created through it); plain connections and
clients that trust another CA are refused, and the listeners keep serving without a traceback."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.kvtclient import KeyValueTable, TableKey, TableUnavailable, create_table
from app.kvtclient.controller import controller_tls
from app.security.certs import CertFiles, make_dev_certs
from app.security.tls import trusting
from app.segmentstore.client.connections import Connection
from app.segmentstore.wire import commands as wc
from app.testing.served import ServedProcess, start_served
from tests.support.stores import start_store

pytestmark = pytest.mark.timeout(120)


def tls_flags(files: CertFiles) -> tuple[str, ...]:
    return (
        "--tls-enabled",
        "--tls-cert-file", str(files.server_cert),
        "--tls-key-file", str(files.server_key),
        "--tls-trust-file", str(files.ca_cert),
    )  # fmt: skip


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_dev_certs(tmp_path / "certs")


@pytest.fixture
def other_ca(tmp_path: Path) -> CertFiles:
    return make_dev_certs(tmp_path / "other")


@pytest.fixture
async def served(db_url: str, tmp_path: Path, certs: CertFiles) -> AsyncIterator[ServedProcess]:
    instance = await start_served(
        tmp_path, "--db-url", db_url, *tls_flags(certs), env={"PGCONTROLLER_LOG_LEVEL": "DEBUG"}
    )
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


def grpc_context(files: CertFiles) -> ssl.SSLContext:
    return trusting(files.ca_cert, alpn=("h2",))


async def list_scopes(port: int, context: ssl.SSLContext | None, host: str = "127.0.0.1") -> list[str]:
    channel = Channel(host, port, ssl=context)
    try:
        reply = await ControllerServiceStub(channel).listScopes(pb.ScopesRequest(), timeout=10)
        return list(reply.scopes)
    finally:
        channel.close()


def assert_quiet(served: ServedProcess) -> None:
    log = served.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


async def test_grpc_is_served_over_tls_only(
    served: ServedProcess, certs: CertFiles, other_ca: CertFiles
) -> None:
    channel = Channel("localhost", served.grpc_port, ssl=grpc_context(certs))
    try:
        stub = ControllerServiceStub(channel)
        created = await stub.createScope(pb.ScopeInfo(scope="sc"), timeout=10)
        assert created.status == pb.CreateScopeStatus.SUCCESS
        # createStream makes the stream's segments in the embedded store: the controller's wire
        # client reaches it over TLS, verified against --tls-trust-file.
        config = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="sc", stream="st"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=2),
        )
        made = await stub.createStream(config, timeout=30)
        assert made.status == pb.CreateStreamStatus.SUCCESS, made
        ranges = await stub.getCurrentSegments(pb.StreamInfo(scope="sc", stream="st"), timeout=10)
        assert len(ranges.segmentRanges) == 2
    finally:
        channel.close()

    with pytest.raises(Exception) as plain:
        await list_scopes(served.grpc_port, None)
    assert not isinstance(plain.value, AssertionError)
    with pytest.raises(ssl.SSLCertVerificationError):
        await list_scopes(served.grpc_port, grpc_context(other_ca))
    # The listener is unaffected by the refused connections.
    assert await list_scopes(served.grpc_port, grpc_context(certs)) == ["sc", "_system"]
    assert_quiet(served)


async def test_rest_is_served_over_tls_only(
    served: ServedProcess, certs: CertFiles, other_ca: CertFiles
) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"https://127.0.0.1:{served.rest_port}/v1/health/liveness"
        async with session.get(url, ssl=trusting(certs.ca_cert)) as answer:
            assert answer.status == 200
        with pytest.raises(aiohttp.ClientConnectionError):
            async with session.get(f"http://127.0.0.1:{served.rest_port}/v1/health/liveness") as plain:
                await plain.read()
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with session.get(url, ssl=trusting(other_ca.ca_cert)):
                pass
        async with session.get(url, ssl=trusting(certs.ca_cert)) as again:
            assert again.status == 200
    assert_quiet(served)


async def segment_info(port: int, context: ssl.SSLContext | None) -> wc.Command:
    connection = await Connection.open(HostAddress("127.0.0.1", port), 10, context)
    try:
        return await connection.request(wc.GetStreamSegmentInfo(7, "sc/none/0.#epoch.0", ""), 10)
    finally:
        connection.close()
        await connection.wait_closed()


async def test_the_embedded_segment_store_is_served_over_tls_only(
    served: ServedProcess, certs: CertFiles, other_ca: CertFiles
) -> None:
    assert served.segment_store_port is not None
    port = served.segment_store_port
    assert isinstance(await segment_info(port, trusting(certs.ca_cert)), wc.NoSuchSegment)
    with pytest.raises(StoreUnavailable):
        await segment_info(port, None)
    with pytest.raises(StoreUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        await segment_info(port, trusting(other_ca.ca_cert))
    assert isinstance(await segment_info(port, trusting(certs.ca_cert)), wc.NoSuchSegment)
    log = served.log()
    assert "TLS handshake with" in log, "a refused handshake is logged at debug"
    assert_quiet(served)


async def test_a_segment_store_process_serves_over_tls_only(
    served: ServedProcess, db_url: str, tmp_path: Path, certs: CertFiles
) -> None:
    # `served` has configured the cluster the store joins; until the leader gives it containers
    # it answers WrongHost, an answer over TLS all the same.
    answers = (wc.NoSuchSegment, wc.WrongHost)
    store = await start_store(tmp_path, "tls-store", db_url, *tls_flags(certs)[:-2])
    try:
        assert isinstance(await segment_info(store.port, trusting(certs.ca_cert)), answers)
        with pytest.raises(StoreUnavailable):
            await segment_info(store.port, None)
        assert isinstance(await segment_info(store.port, trusting(certs.ca_cert)), answers)
    finally:
        assert await store.stop() == 0, store.log()
    assert "Traceback" not in store.log()


async def test_the_key_value_table_client_works_over_tls_and_refuses_another_ca(
    served: ServedProcess, certs: CertFiles, other_ca: CertFiles
) -> None:
    address = f"tls://localhost:{served.grpc_port}"
    tls = controller_tls(address, certs.ca_cert)
    assert await list_scopes(served.grpc_port, grpc_context(certs)) == ["_system"]
    channel = Channel("127.0.0.1", served.grpc_port, ssl=grpc_context(certs))
    try:
        await ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope="kv"), timeout=10)
    finally:
        channel.close()
    assert await create_table(address, "kv", "t", partitions=2, primary_key_length=4, tls=tls)
    # The table's segments live in the TLS-only embedded store, reached at getURI's address.
    async with await KeyValueTable.open(address, "kv", "t", tls=tls) as table:
        version = await table.put(TableKey(b"key1"), b"value")
        entry = await table.get(TableKey(b"key1"))
        assert entry is not None and (entry.value, entry.version) == (b"value", version)
    # The command line: a tls:// controller and the CA to verify it and its stores with.
    shown = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "kvt", "--controller", address,
        "--tls-trust-file", str(certs.ca_cert), "get", "kv", "t", "key1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(shown.communicate(), 60)
    assert shown.returncode == 0, err.decode()
    assert out.decode().split("\t")[0] == "value"
    with pytest.raises(TableUnavailable):
        await KeyValueTable.open(address, "kv", "t", tls=controller_tls(address, other_ca.ca_cert))
    with pytest.raises(TableUnavailable):
        await KeyValueTable.open(f"localhost:{served.grpc_port}", "kv", "t")
    assert_quiet(served)


def health_check_line() -> str:
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    return next(line for line in dockerfile.splitlines() if line.startswith("HEALTHCHECK"))


async def test_the_images_health_check_speaks_https_when_tls_is_on(served: ServedProcess) -> None:
    line = health_check_line()
    code = line.split('python -c "', 1)[1].rsplit('"', 1)[0].replace(":9091/", f":{served.rest_port}/")

    async def probe(tls: str) -> int:
        env = {**os.environ, "PGCONTROLLER_TLS_ENABLED": tls}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, env=env, stderr=asyncio.subprocess.DEVNULL
        )
        return await asyncio.wait_for(process.wait(), 30)

    # Readiness waits for the process's share of buckets, so a fresh process may answer false first.
    for _ in range(60):
        if (ready := await probe("true")) == 0:
            break
        await asyncio.sleep(0.5)
    assert ready == 0
    assert await probe("") != 0, "plain HTTP to the TLS port must fail"
