"""A served process's own log as an operator reads it: JSON lines when asked, a quiet start at
INFO (no Alembic set-up chatter, bucket claims as ranges) and a SIGTERM that warns of nothing."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp

from app.testing.served import start_served


async def test_json_start_and_sigterm_are_quiet(db_url: str, tmp_path: Path) -> None:
    served = await start_served(tmp_path, "--db-url", db_url, env={"PGCONTROLLER_LOG_FORMAT": "json"})
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{served.rest_base}/v1/scopes") as response:
            assert response.status == 200
        # The bucket claims come with the first cluster round, just after readiness.
        for _ in range(400):
            if "watermarks buckets claimed" in served.log():
                break
            await asyncio.sleep(0.05)
    finally:
        served.process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(served.process.wait(), timeout=15)
    text = served.log()
    assert code == 0, text
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    assert not [line for line in lines if line["logger"].startswith("alembic")], text
    claims = [line["message"] for line in lines if "watermarks buckets claimed" in line["message"]]
    # One range, not a hundred numbers (the test cluster's watermark bucket count).
    assert claims and all("," not in claim.split(": ", 1)[1] for claim in claims), claims
    access = [line for line in lines if line["logger"] == "pgcontroller.access"]
    assert [(a["method"], a["path"], a["status"]) for a in access] == [("GET", "/v1/scopes", 200)]
    shutdown = [line["message"] for line in lines].index("shutdown requested")
    assert [line for line in lines[shutdown:] if line["level"] in ("WARNING", "ERROR")] == [], text
