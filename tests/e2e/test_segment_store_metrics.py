"""A `pgcontroller segment-store` process publishes its own metrics and probes on an HTTP listener
of its own: its append and read counters move as events go through it (the project's wire client,
over TCP), the listener speaks TLS when the store does, closes with the store on SIGTERM, is not
opened with --no-metrics, and a port already taken stops the store, before it registers, with one
clear line."""

from __future__ import annotations

import re
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.clock import SystemClock
from app.ports import HostAddress
from app.security.certs import make_dev_certs
from app.security.tls import trusting
from app.segmentstore.wire import commands as wc
from app.services.containers import ContainerMapService
from app.store.cluster import PgClusterStore
from app.store.containers import PgContainerMapStore
from app.testing.ports import free_port
from tests.segmentstore.server_harness import Client, event, wid
from tests.support.stores import StoreProcess, eventually, serves, start_store

pytestmark = pytest.mark.timeout(120)

NOBODY = (HostAddress("127.0.0.1", 1),)  # the static host: no store is it
SEGMENT = "sc/st/0.#epoch.0"


def counter(body: str, name: str, store: str) -> float | None:
    """The sample of `name{store="<store>"}` in an exposition, None when it is absent."""
    found = re.search(rf'^{re.escape(name)}\{{store="{re.escape(store)}"\}} (\S+)$', body, re.M)
    return None if found is None else float(found.group(1))


async def scrape(base: str, path: str = "/prometheus", tls: ssl.SSLContext | None = None) -> str:
    async with aiohttp.ClientSession() as http, http.get(base + path, ssl=tls or False) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return await response.text()


async def give_it_every_container(pool: Any, store: StoreProcess) -> None:
    """The test acts as the leader: the map gives the one registered store every container."""
    count = (await PgClusterStore(pool).get_settings()).container_count
    service = ContainerMapService(PgContainerMapStore(pool), SystemClock(), count, NOBODY)
    await service.rebalance()
    owners = {row.value for row in (await PgContainerMapStore(pool).read_container_map()).values()}
    assert owners == {HostAddress(*store.address)}
    await eventually(lambda: serves(store, SEGMENT), 10, "the store follows the map it was given")


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_a_store_process_publishes_its_traffic_and_probes_and_closes_them_on_stop(
    pool: Any, db_url: str, tmp_path: Path
) -> None:
    store = await start_store(tmp_path, "m", db_url)
    assert store.metrics_port is not None and store.metrics_port != store.port
    base = f"http://127.0.0.1:{store.metrics_port}"
    label = f"127.0.0.1:{store.port}"
    appends = "pgcontroller_segmentstore_appends_total"
    try:
        assert counter(await scrape(base), appends, label) in (None, 0.0)
        async with aiohttp.ClientSession() as http:
            async with http.head(base + "/metrics") as head:
                assert head.status == 200 and await head.read() == b""
            for probe in ("liveness", "readiness"):
                async with http.get(f"{base}/v1/health/{probe}?strict=true") as answer:
                    assert (answer.status, await answer.json()) == (200, True), probe
            async with http.get(base + "/v1/health") as answer:
                assert (await answer.json())["children"]["segment-store"]["status"] == "UP"

        await give_it_every_container(pool, store)
        client = await Client.connect(store.address)
        try:
            segment = SEGMENT
            await client.create(segment)
            writer = wid()
            await client.setup(segment, writer)
            payloads = [event(b"one"), event(b"two"), event(b"three")]
            for number, data in enumerate(payloads, start=1):
                assert isinstance(await client.append(writer, data, number), wc.DataAppended)
            assert isinstance(await client.read(segment, 0), wc.SegmentRead)
        finally:
            await client.close()

        for path in ("/prometheus", "/metrics"):
            body = await scrape(base, path)
            assert counter(body, appends, label) == 3.0, body
            assert counter(body, "pgcontroller_segmentstore_append_bytes_total", label) == sum(
                len(p) for p in payloads
            )
            assert (counter(body, "pgcontroller_segmentstore_reads_total", label) or 0) >= 1
    finally:
        assert await store.stop() == 0, store.log()
    assert refused(store.metrics_port), "the listener closes with the store"
    assert f"metrics and probes on port {store.metrics_port}" in store.log()
    assert "Traceback" not in store.log()


async def test_no_metrics_opens_no_listener(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    store = await start_store(
        tmp_path, "quiet", db_url, "--no-metrics", "--segment-store-metrics-port", str(port)
    )
    try:
        assert store.metrics_port is None
        assert refused(port)
        assert "no metrics listener" in store.log()
    finally:
        assert await store.stop() == 0, store.log()


async def test_a_taken_metrics_port_stops_the_store_before_it_registers(
    pool: Any, db_url: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=r"segment-store exited with 1") as failed:
            await start_store(tmp_path, "clash", db_url, "--segment-store-metrics-port", str(port))
    log = str(failed.value)
    assert f"cannot listen for metrics on 127.0.0.1:{port}" in log
    assert "Traceback" not in log and "never retrieved" not in log
    # Bound first: a store that joined and left at once would have moved containers for nothing.
    assert "registered" not in log and await PgContainerMapStore(pool).list_hosts() == []


async def test_the_metrics_listener_speaks_tls_when_the_store_does(db_url: str, tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path / "certs")
    flags = (
        "--tls-enabled",
        "--tls-cert-file",
        str(certs.server_cert),
        "--tls-key-file",
        str(certs.server_key),
    )
    store = await start_store(tmp_path, "tls", db_url, *flags)
    try:
        assert store.metrics_port is not None
        body = await scrape(f"https://localhost:{store.metrics_port}", tls=trusting(certs.ca_cert))
        assert "pgcontroller_segmentstore_appends_total" in body
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{store.metrics_port}/prometheus") as plain:
                    await plain.read()
    finally:
        assert await store.stop() == 0, store.log()
