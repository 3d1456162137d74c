"""The Java suite's `secure` profile: `serve` and Pravega 0.13 standalone, both with
authentication and TLS on, the same accounts and a certificate from the same CA
(tests/conformance/secure.py); as in the plain run, a check that fails on `serve` or differs from
Pravega without a row in docs/compatibility.md fails this test."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conformance.conftest import started_pair
from tests.conformance.java_suite import record_summary, run_suite
from tests.conformance.secure import prepare_secure

pytestmark = pytest.mark.timeout(1800)


async def test_java_client_behaves_securely_on_serve_as_on_pravega(tmp_path: Path) -> None:
    setup = await asyncio.to_thread(prepare_secure, tmp_path / "secure")
    async with started_pair(
        tmp_path, setup.serve_args, setup.serve_env, setup.standalone_properties, scheme="tls"
    ) as (served, oracle):
        run = await run_suite(
            *("--profile", "secure"),
            *("--controller", f"{setup.serve_scheme}://localhost:{served.grpc_port}"),
            *("--oracle", oracle.controller_uri),
            *("--user", setup.user, "--password", setup.password),
            *("--trust-store", str(setup.ca_pem)),
            report=tmp_path / "report.jsonl",
            timeout_s=1500,
        )
    record_summary("secure", run)
    assert run.returncode == 0, f"{run.summary}\n{run.failures()[-20000:]}"
