"""A real controller over a real database for tests: composed and run by `open_process`, the entry
`serve` uses (the same components: the embedded segment store joined to the cluster, the
background loops, the metadata-store probe), without what belongs to an OS process of its own
(signals, the ready file, the shutdown watchdog) and without the gRPC and REST listeners, which
`serving` starts on loopback ports. The background loops run unless `workers=False`."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from app.clock import SystemClock
from app.ports import HostAddress
from app.process import HARNESS, Role, Runtime, open_process
from app.services.health import HealthService
from app.settings import Settings
from app.store.cluster import PgClusterStore
from app.store.pool import create_pool
from app.testing.segment_store import tier_from_environment
from app.wiring import Controller, Servers, start_servers

# Short polls and retries so a test waits for little. Pravega's test transaction configuration
# (lease 10 ms .. 30 s) so timeouts happen within a test; the expiry grace is small for the same
# reason.
TEST_SETTINGS = Settings(
    # Each controller starts its own embedded segment store on a free port, as `serve` does.
    segment_store_port=0,
    segment_store_tail_wait_s=2.0,
    pool_max_size=10,
    request_poll_s=0.2,
    seal_busy_first_s=0.02,
    cluster_interval_s=0.2,
    txn_min_lease_ms=10,
    txn_max_lease_ms=30_000,
    txn_timeout_grace_ms=50,
)


def new_member_id() -> str:
    # Short enough for application_name (63 bytes) with its prefix; unique per controller.
    return f"{socket.gethostname()[:24]}-{uuid.uuid4().hex[:12]}"


class FixedCluster:
    def __init__(self, endpoints: list[HostAddress]) -> None:
        self.endpoints = endpoints

    async def live_controllers(self) -> list[HostAddress]:
        return self.endpoints


@dataclass
class Services:
    """The wired Controller and the process it runs in, plus a fixed cluster view for
    getControllerServerList."""

    runtime: Runtime
    cluster: FixedCluster

    @property
    def controller(self) -> Controller:
        assert self.runtime.controller is not None
        return self.runtime.controller

    @property
    def tasks(self) -> Mapping[str, asyncio.Task[None]]:
        """The background tasks by name (the loops only with workers=True), for tests of their health."""
        return self.runtime.loops.tasks

    def loop_running(self, name: str) -> bool | None:
        """True while the named loop runs, False once it ended, None when it never started."""
        return self.runtime.loops.running(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.controller, name)


@asynccontextmanager
async def running_controller(
    url: str, *, completion_timeout_s: float = 30.0, workers: bool = True, **overrides: Any
) -> AsyncIterator[Services]:
    """`overrides` are Settings fields (e.g. instance_id, rebalance_delay_s)."""
    settings = await _settings(url, {"completion_timeout_s": completion_timeout_s, **overrides})
    async with open_process(settings, Role.CONTROLLER, replace(HARNESS, workers=workers)) as runtime:
        services = Services(runtime, FixedCluster([HostAddress("127.0.0.1", 9090)]))
        if workers:
            await asyncio.wait_for(services.controller.listener.connected.wait(), 10)
            await asyncio.wait_for(services.controller.cluster_node.first_round.wait(), 10)
        yield services


async def _settings(url: str, overrides: dict[str, Any]) -> Settings:
    """The test settings for this database: its cluster's bucket and container counts, as `serve`
    would have joined them, and a fresh member id unless one is given."""
    pool = await create_pool(url, min_size=1, max_size=1)
    try:
        cluster = await PgClusterStore(pool).get_settings()
    finally:
        await pool.close()
    fields: dict[str, Any] = {
        "db_url": url,
        "instance_id": new_member_id(),
        "request_buckets": cluster.counts.requests,
        "retention_buckets": cluster.counts.retention,
        "watermark_buckets": cluster.counts.watermarks,
        "container_count": cluster.container_count,
        **tier_from_environment(),
        **overrides,
    }
    return replace(TEST_SETTINGS, **fields)


@asynccontextmanager
async def idle_controller(url: str, *scopes: str) -> AsyncIterator[Services]:
    """The services without background loops, the setting of store tests, with `scopes` created."""
    async with running_controller(url, workers=False) as running:
        for scope in scopes:
            await running.scopes.create_scope(scope)
        yield running


@asynccontextmanager
async def serving(
    services: Services, health: HealthService | None = None, **overrides: Any
) -> AsyncIterator[Servers]:
    """`services`' controller behind real gRPC and REST listeners on loopback ports, as `serve`
    starts them; `overrides` are Settings fields the servers read (e.g. auth_enabled=True)."""
    settings = replace(
        TEST_SETTINGS, grpc_host="127.0.0.1", grpc_port=0, rest_host="127.0.0.1", rest_port=0, **overrides
    )
    health = HealthService(SystemClock()) if health is None else health
    servers = await start_servers(settings, services.controller, health)
    try:
        yield servers
    finally:
        await servers.close(2.0)
