"""What the metrics tests share: a scrape of `/prometheus` parsed with prometheus-client's own
parser, a served controller's addresses, and waiting for a counter a worker moves."""

from __future__ import annotations

import asyncio

import aiohttp
from grpclib.client import Channel
from prometheus_client.parser import text_string_to_metric_families

from app.api.grpc.proto.controller_grpc import ControllerServiceStub

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
P = "pravega_controller_"


async def scrape(base: str, path: str = "/prometheus") -> Samples:
    async with aiohttp.ClientSession() as http, http.get(base + path) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class Served:
    def __init__(self, rest_port: int, grpc_port: int) -> None:
        self.base = f"http://127.0.0.1:{rest_port}"
        self.grpc_uri = f"tcp://127.0.0.1:{grpc_port}"
        self.channel = Channel("127.0.0.1", grpc_port)
        self.stub = ControllerServiceStub(self.channel)


async def counted(served: Served, since: Samples, name: str, expected: float) -> Samples:
    """The first scrape whose `name` has grown by `expected` since `since` (a worker counts just
    after the state it wrote is visible, so a scrape right after the state can come first)."""
    for _ in range(600):
        now = await scrape(served.base)
        if value(now, name) - value(since, name) >= expected:
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} did not grow by {expected} within 30 s")
