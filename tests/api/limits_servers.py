"""The controller served in-process through the production server construction (app/wiring/servers.py:
the gRPC server with its message guards, the REST runner with its body limit) on loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from app.clock import SystemClock
from app.services.health import HealthService
from app.testing.controller import TEST_SETTINGS, Services
from app.wiring.servers import Servers, start_servers


@asynccontextmanager
async def production_servers(services: Services) -> AsyncIterator[Servers]:
    settings = replace(TEST_SETTINGS, grpc_port=0, rest_port=0)
    servers = await start_servers(settings, services.controller, HealthService(SystemClock()))
    try:
        yield servers
    finally:
        await servers.close(5)
