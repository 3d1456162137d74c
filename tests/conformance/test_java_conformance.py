"""Pravega's Java client against `serve`, every check compared with Pravega 0.13 standalone: a
check that fails on `serve`, or whose outcome differs from Pravega's without a row in
docs/compatibility.md, fails this test (the runner's lines say which and how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.testing.served import ServedProcess
from tests.conformance.java_suite import record_summary, run_suite
from tests.conformance.pravega_standalone import Standalone

# The first run on a machine downloads the suite's and the oracle's jars (a few hundred MiB).
pytestmark = pytest.mark.timeout(1800)


async def test_java_client_behaves_on_serve_as_on_pravega(
    servers: tuple[ServedProcess, Standalone], tmp_path: Path
) -> None:
    served, oracle = servers
    run = await run_suite(
        "--controller",
        served.grpc_uri,
        "--oracle",
        oracle.controller_uri,
        report=tmp_path / "report.jsonl",
        timeout_s=1500,
    )
    record_summary("plain", run)
    assert run.returncode == 0, f"{run.summary}\n{run.failures()[-20000:]}"
