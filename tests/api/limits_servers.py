"""The controller served in-process through the production server construction (app/wiring/servers.py:
the gRPC server with its message guards, the REST runner with its body limit) on loopback ports,
and a ticker on the same event loop that measures how late it wakes (the loop's responsiveness)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from types import TracebackType

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


class LoopTicker:
    """Sleeps `period_s` over and over on the running loop, recording the worst lateness: a loop
    held by synchronous work for X ms shows here as about X ms late."""

    def __init__(self, period_s: float = 0.005) -> None:
        self.period_s = period_s
        self.max_late_s = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.period_s)
            self.max_late_s = max(self.max_late_s, loop.time() - asked - self.period_s)
            self.ticks += 1

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task
