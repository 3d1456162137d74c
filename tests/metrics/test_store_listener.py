"""The segment-store process's HTTP listener on its own (real aiohttp server over loopback): it
serves the scrape and the probes, readiness answers 503 once shutdown has begun (`drain`), and
`close` really stops listening (the process's ordered shutdown relies on it)."""

from __future__ import annotations

import socket

import aiohttp

from app.clock import SystemClock
from app.services.health import HealthService, HealthStatus
from app.settings import Settings
from app.wiring.store_listener import SEGMENT_STORE, start_metrics_listener, store_health


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_the_listener_answers_probes_drains_and_closes() -> None:
    health = store_health()
    settings = Settings(segment_store_host="127.0.0.1", segment_store_metrics_port=0)
    listener = await start_metrics_listener(settings, health)
    assert listener is not None and listener.port != 0
    base = f"http://127.0.0.1:{listener.port}"
    try:
        async with aiohttp.ClientSession() as http:
            # Bound before the store starts: alive, not ready.
            async with http.get(base + "/v1/health/readiness?strict=true") as starting:
                assert (starting.status, await starting.json()) == (503, False)
            async with http.get(base + "/v1/health/liveness?strict=true") as alive:
                assert (alive.status, await alive.json()) == (200, True)
            health.set(SEGMENT_STORE, HealthStatus.UP)  # what watch_store reports of a running store
            async with http.get(base + "/prometheus") as scraped:
                assert scraped.status == 200
                assert "# TYPE pgcontroller_segmentstore_appends_total counter" in await scraped.text()
            async with http.get(base + "/v1/health/readiness?strict=true") as ready:
                assert (ready.status, await ready.json()) == (200, True)
            async with http.get(base + "/v1/health/readiness?strict=maybe") as bad:
                assert bad.status == 400 and "strict" in (await bad.json())["message"]
            health.drain()
            async with http.get(base + "/v1/health/readiness?strict=true") as draining:
                assert (draining.status, await draining.json()) == (503, False)
            async with http.get(base + "/v1/health/liveness?strict=true") as alive:
                assert (alive.status, await alive.json()) == (200, True)
            async with http.get(base + "/v1/scopes") as other:
                assert other.status == 404, "the store's listener serves nothing of the controller's"
                assert await other.json() == {"code": 404, "message": "GET /v1/scopes: Not Found"}
            async with http.post(base + "/metrics") as wrong:
                assert (wrong.status, (await wrong.json())["code"]) == (405, 405)
                assert "GET" in wrong.headers["Allow"]
    finally:
        await listener.close(5.0)
    assert refused(listener.port)


async def test_no_metrics_starts_no_listener() -> None:
    settings = Settings(no_metrics=True, segment_store_metrics_port=0)
    assert await start_metrics_listener(settings, HealthService(SystemClock())) is None
