"""The `served` fixture of the metrics tests: `serve`'s gRPC and REST servers over the suite's
controller, with a stub and the REST base (tests/metrics/scraping.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.testing.controller import Services, serving
from tests.metrics.scraping import Served


@pytest.fixture
async def served(services: Services) -> AsyncIterator[Served]:
    async with serving(services) as servers:
        handle = Served(servers.rest_port, servers.grpc_port)
        try:
            yield handle
        finally:
            handle.channel.close()
