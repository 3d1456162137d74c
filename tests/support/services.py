"""Real services over a real database, wired by app.main exactly as `serve` wires them
(minus the servers), with the request workers running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from app.domain.txns import TxnLimits
from app.main import Controller, build_controller
from app.ports import ControllerEndpoint
from app.segmentstore.hosts import HostAddress
from app.store.cluster import PgClusterStore
from app.store.pool import create_pool

SEGMENT_STORE_HOSTS = (HostAddress("10.0.0.1", 12345), HostAddress("10.0.0.2", 12346))

# Pravega's test configuration (lease 10 ms .. 30 s) so timeouts happen within a test; the
# expiry grace is kept small for the same reason.
TEST_TXN_LIMITS = TxnLimits(min_lease_ms=10, max_lease_ms=30_000, timeout_grace_ms=50)


class FixedCluster:
    def __init__(self, endpoints: list[ControllerEndpoint]) -> None:
        self.endpoints = endpoints

    async def live_controllers(self) -> list[ControllerEndpoint]:
        return self.endpoints


@dataclass
class Services:
    """The wired Controller, plus a fixed cluster view for getControllerServerList."""

    controller: Controller
    cluster: FixedCluster

    def __getattr__(self, name: str) -> Any:
        return getattr(self.controller, name)


@asynccontextmanager
async def running_controller(
    url: str,
    *,
    completion_timeout_s: float = 30.0,
    workers: bool = True,
    txn_limits: TxnLimits = TEST_TXN_LIMITS,
    **overrides: Any,
) -> AsyncIterator[Services]:
    """`overrides` go to build_controller as they are (e.g. member_id, rebalance_delay_ms)."""
    pool = await create_pool(url, min_size=1, max_size=10)
    cluster = await PgClusterStore(pool).get_settings()
    controller = build_controller(
        url,
        pool,
        SEGMENT_STORE_HOSTS,
        counts=cluster.counts,
        container_count=cluster.container_count,
        completion_timeout_s=completion_timeout_s,
        seal_busy_first_s=0.02,
        poll_s=0.2,
        txn_limits=txn_limits,
        **{"cluster_interval_s": 0.2, **overrides},
    )
    services = Services(controller, FixedCluster([ControllerEndpoint("127.0.0.1", 9090)]))
    tasks = [asyncio.create_task(c, name=n) for n, c in controller.loops().items()] if workers else []
    try:
        if workers:
            await asyncio.wait_for(controller.listener.connected.wait(), 10)
            await asyncio.wait_for(controller.cluster_node.first_round.wait(), 10)
        yield services
    finally:
        if workers:
            await controller.stop_workers(5)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await pool.close()


@asynccontextmanager
async def idle_controller(url: str, *scopes: str) -> AsyncIterator[Services]:
    """The services without background loops, the setting of store tests, with `scopes` created."""
    async with running_controller(url, workers=False) as running:
        for scope in scopes:
            await running.scopes.create_scope(scope)
        yield running
