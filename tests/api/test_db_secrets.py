"""A database that refuses the service's password: REST answers 503 without the password, the
database's host or port; the log has the detail (who, where) but never the password."""

from __future__ import annotations

import logging
import socket
from dataclasses import replace

import aiohttp
import pytest

import pgurl
from app.clock import SystemClock
from app.services.health import HealthService, HealthStatus
from app.store.pool import create_pool
from app.testing.controller import TEST_SETTINGS
from app.wiring import open_resources, wire
from tests.api.test_no_leaks import _served

WRONG = "Wr0ngS3cretNeverShown"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("fault", ["wrong password", "nobody listening"])
async def test_a_refused_database_is_a_503_without_secret_or_address(
    db_url: str, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    real = pgurl.parse(db_url)
    params = {k: v for k, v in real.params.items() if k != "passfile"}
    port = real.ports[0] if fault == "wrong password" else _closed_port()
    url = real.replace(password=WRONG, params=params, ports=(port,)).to_url()
    host = real.hosts[0]
    caplog.set_level(logging.DEBUG)
    pool = await create_pool(url, min_size=0, max_size=1)
    try:
        settings = replace(TEST_SETTINGS, db_url=url, instance_id="wrong-password")
        controller = wire(settings, open_resources(settings, url, pool))
        health = HealthService(SystemClock())
        health.set("metadata-store", HealthStatus.DOWN, error="the metadata store is unavailable")
        async with _served(controller, health) as (_, rest_port), aiohttp.ClientSession() as http:
            for method, path in (("GET", "/v1/scopes"), ("POST", "/v1/scopes"), ("GET", "/v1/scopes/x")):
                body = {"scopeName": "x"} if method == "POST" else None
                async with http.request(method, f"http://127.0.0.1:{rest_port}{path}", json=body) as response:
                    text = await response.text()
                    assert response.status == 503, (path, response.status, text)
                    assert WRONG not in text and f":{port}" not in text and str(host) not in text, text
    finally:
        await pool.close()
    logged = "\n".join(r.getMessage() + "".join(getattr(r, "exc_text", "") or "") for r in caplog.records)
    # The operator sees why (the driver's text, under the error id) but not the secret.
    expected = "password authentication failed" if fault == "wrong password" else str(port)
    assert expected in logged, logged[-2000:]
    assert WRONG not in logged and WRONG not in caplog.text
