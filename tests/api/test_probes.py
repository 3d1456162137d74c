"""Probes over real listeners: each health contributor over REST in Pravega's shapes, the
`strict` flag orchestrators use, readiness following bucket ownership, loops and the database,
and the gRPC health-checking service (grpc.health.v1) over a real grpclib channel."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import asyncpg
import pytest
from grpclib.client import Channel
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse

from app.clock import SystemClock
from app.domain.cluster import BucketService
from app.services.health import HealthService, HealthStatus, probe_metadata_store
from app.store.probe import PgProbe
from app.testing.controller import Services, running_controller, serving
from app.wiring import Servers, register_contributors
from workers.buckets import LOCK_NAMESPACES

CONTRIBUTORS = (
    "cluster-membership",
    "container-balancer",
    "grpc-server",
    "metadata-store",
    "request-processors",
    "requests-buckets",
    "retention-buckets",
    "segment-store",
    "watermarks-buckets",
)
CONTROLLER_SERVICE = "io.pravega.controller.stream.api.grpc.v1.ControllerService"


@dataclass
class Probed:
    services: Services
    servers: Servers
    health: HealthService
    http: aiohttp.ClientSession

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.servers.rest_port}/v1/health"

    async def get(self, path: str) -> tuple[int, object]:
        async with self.http.get(self.base + path) as response:
            return response.status, await response.json()


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.05)


def closed_port_url(db_url: str) -> str:
    """The database URL with its port replaced by one nothing listens on: a database that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    head, _, tail = db_url.partition("@")
    _, _, rest = tail.partition("/")
    return f"{head}@127.0.0.1:{port}/{rest}"


@asynccontextmanager
async def probed(
    db_url: str, probe_url: str | None = None, **serving_overrides: object
) -> AsyncIterator[Probed]:
    """A running controller with serve's contributors, behind real listeners; the metadata-store
    probe loop pings `probe_url` (the controller's own database unless given)."""
    clock = SystemClock()
    health = HealthService(clock)
    health.set("metadata-store", HealthStatus.STARTING)
    async with running_controller(db_url) as services:
        register_contributors(health, services.controller, services.loop_running, None)
        probe = PgProbe(probe_url or db_url)
        loop = asyncio.create_task(
            probe_metadata_store(health, probe.ping, clock, lost=probe.lost), name="metadata-store-probe"
        )
        try:
            async with (
                serving(services, health, **serving_overrides) as servers,
                aiohttp.ClientSession() as http,
            ):
                yield Probed(services, servers, health, http)
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            await probe.close()


async def ready(p: Probed) -> bool:
    return (await p.get("/readiness")) == (200, True)


# Details that change with every round of their check (the metadata-store probe's time): two
# reads a moment apart may differ there and nowhere else.
_PER_ROUND_DETAILS = frozenset({"checked_at"})


def _steady_details(details: object) -> object:
    if not isinstance(details, dict):
        return details
    return {key: value for key, value in details.items() if key not in _PER_ROUND_DETAILS}


def _steady(body: object) -> object:
    if not isinstance(body, dict):
        return body
    return {**body, "details": _steady_details(body.get("details"))}


async def test_each_contributor_answers_on_every_per_id_path(db_url: str) -> None:
    async with probed(db_url) as p:
        await until(functools.partial(ready, p))
        status, tree = await p.get("")
        assert status == 200 and isinstance(tree, dict)
        assert sorted(tree["children"]) == list(CONTRIBUTORS)
        for name in CONTRIBUTORS:
            status, body = await p.get(f"/{name}")
            assert status == 200
            assert _steady(body) == _steady(tree["children"][name])
            assert body["status"] == "UP" and body["readiness"] is True and body["liveness"] is True
            assert await p.get(f"/readiness/{name}") == (200, True)
            assert await p.get(f"/liveness/{name}") == (200, True)
            assert await p.get(f"/status/{name}") == (200, "UP")
            status, details = await p.get(f"/details/{name}")
            assert status == 200 and _steady_details(details) == _steady_details(body["details"])
        # What the verdicts rest on is in the details.
        _, buckets = await p.get("/details/requests-buckets")
        assert isinstance(buckets, dict) and buckets["owned"] == buckets["assigned"] == "16"
        assert buckets["request-dispatcher"] == "running"
        for path in ("/nope", "/readiness/nope", "/liveness/nope", "/details/nope", "/status/nope"):
            status, error = await p.get(path)
            assert status == 404 and error == {"code": 404, "message": "no health contributor named 'nope'"}


async def test_strict_flag_answers_503_when_not_ready_or_not_alive(db_url: str) -> None:
    async with probed(db_url) as p:
        await until(functools.partial(ready, p))
        assert await p.get("/readiness?strict=true") == (200, True)
        assert await p.get("/liveness?strict=true") == (200, True)
        assert await p.get("/readiness/cluster-membership?strict=true") == (200, True)
        status, error = await p.get("/readiness?strict=maybe")
        assert status == 400 and isinstance(error, dict) and "strict" in error["message"]

        p.health.drain()
        # Pravega's own form keeps 200 with the verdict; the strict form turns it into 503.
        assert await p.get("/readiness") == (200, False)
        assert await p.get("/readiness?strict=true") == (503, False)
        assert await p.get("/readiness/cluster-membership?strict=true") == (503, False)
        # A draining process is still alive: a liveness probe must not restart it mid-drain.
        assert await p.get("/liveness?strict=true") == (200, True)

        p.health.set("metadata-store", HealthStatus.FAILED)
        assert await p.get("/liveness") == (200, False)
        assert await p.get("/liveness?strict=true") == (503, False)
        assert await p.get("/liveness/metadata-store?strict=true") == (503, False)
        assert await p.get("/liveness/segment-store?strict=true") == (200, True)


async def test_readiness_is_false_while_an_assigned_bucket_is_not_owned(db_url: str) -> None:
    # Another session holds request bucket 0's lock: the cluster assigns it here, but it cannot
    # be claimed, so nobody works it and this process must not call itself ready.
    holder = await asyncpg.connect(db_url)
    try:
        namespace = LOCK_NAMESPACES[BucketService.REQUESTS]
        assert await holder.fetchval("SELECT pg_try_advisory_lock($1::int, 0)", namespace)
        async with probed(db_url) as p:

            async def bucket_missing() -> bool:
                _, body = await p.get("/requests-buckets")
                assert isinstance(body, dict)
                return body["details"].get("assigned") == "16" and body["details"]["owned"] == "15"

            await until(bucket_missing)
            assert await p.get("/status/requests-buckets") == (200, "DOWN")
            assert await p.get("/readiness/requests-buckets?strict=true") == (503, False)
            assert await p.get("/readiness?strict=true") == (503, False)
            assert await p.get("/readiness/retention-buckets") == (200, True)

            await holder.fetchval("SELECT pg_advisory_unlock($1::int, 0)", namespace)
            await until(functools.partial(ready, p))
            assert await p.get("/status/requests-buckets") == (200, "UP")
    finally:
        await holder.close()


async def test_readiness_is_false_once_a_loop_has_died(db_url: str) -> None:
    async with probed(db_url) as p:
        await until(functools.partial(ready, p))
        retention = p.services.tasks["retention"]
        retention.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await retention
        assert await p.get("/readiness?strict=true") == (503, False)
        _, body = await p.get("/retention-buckets")
        assert isinstance(body, dict)
        assert body["status"] == "DOWN" and body["details"]["retention"] == "ended"
        assert await p.get("/readiness/requests-buckets") == (200, True)

        txn_gc = p.services.tasks["txn-gc"]
        txn_gc.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await txn_gc
        _, processors = await p.get("/request-processors")
        assert isinstance(processors, dict)
        assert processors["status"] == "DOWN" and processors["details"]["txn-gc"] == "ended"


async def test_readiness_is_false_while_the_database_is_down(db_url: str) -> None:
    async with probed(db_url, probe_url=closed_port_url(db_url)) as p:

        async def store_down() -> bool:
            return (await p.get("/status/metadata-store")) == (200, "DOWN")

        await until(store_down)
        assert await p.get("/readiness?strict=true") == (503, False)
        assert await p.get("/details/metadata-store") == (200, {"error": "the metadata store is unavailable"})
        # The contributor is not alive in Pravega's terms (DOWN), but the process is: a restart
        # would not bring the database back, so a liveness probe must not ask for one.
        assert await p.get("/liveness/metadata-store?strict=true") == (503, False)
        assert await p.get("/liveness?strict=true") == (200, True)


async def test_grpc_health_service_follows_readiness_and_needs_no_credentials(db_url: str) -> None:
    # Security on: the health service must still answer a caller that sends no credentials.
    async with probed(db_url, auth_enabled=True) as p:
        channel = Channel("127.0.0.1", p.servers.grpc_port)
        try:
            stub = HealthStub(channel)
            serving_status = HealthCheckResponse.SERVING

            async def grpc_serving() -> bool:
                reply = await stub.Check(HealthCheckRequest(service=""))
                return reply is not None and reply.status == serving_status

            await until(grpc_serving)
            reply = await stub.Check(HealthCheckRequest(service=CONTROLLER_SERVICE))
            assert reply is not None and reply.status == serving_status

            async with stub.Watch.open() as watch:
                await watch.send_message(HealthCheckRequest(service=CONTROLLER_SERVICE), end=True)
                first = await watch.recv_message()
                assert first is not None and first.status == serving_status
                p.health.drain()
                changed = await asyncio.wait_for(watch.recv_message(), timeout=5)
                assert changed is not None and changed.status == HealthCheckResponse.NOT_SERVING
                await watch.cancel()

            for service in ("", CONTROLLER_SERVICE):
                reply = await stub.Check(HealthCheckRequest(service=service))
                assert reply is not None and reply.status == HealthCheckResponse.NOT_SERVING
        finally:
            channel.close()


@pytest.mark.parametrize("path", ["/readiness/{id}", "/{id}"])
async def test_per_id_paths_are_open_with_security_on(db_url: str, path: str) -> None:
    async with probed(db_url, auth_enabled=True) as p:
        status, _ = await p.get(path.format(id="grpc-server"))
        assert status == 200
