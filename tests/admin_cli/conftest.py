"""A controller served over loopback gRPC and REST, and `pgcontroller` run against it as an
operator runs it: a separate process (`python -m app.cli ...`), its exit code, stdout and stderr."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.testing.controller import Services, serving
from tests.support.processes import output_within

ROOT = Path(__file__).resolve().parents[2]
# Credentials and addresses an operator's shell may carry must not leak into the tests' commands.
_CLEARED = (
    "PGCONTROLLER_CONTROLLER_URI",
    "PGCONTROLLER_REST_URL",
    "PGCONTROLLER_USERNAME",
    "PGCONTROLLER_PASSWORD",
    "pravega_client_auth_method",
    "pravega_client_auth_username",
    "pravega_client_auth_password",
    "pravega_client_auth_token",
)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


async def pgcontroller(*argv: str, env: dict[str, str] | None = None, timeout_s: float = 60.0) -> Result:
    environment = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    environment.update(env or {})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        *argv,
        cwd=ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await output_within(process, timeout_s, f"pgcontroller {' '.join(argv)}")
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


@dataclass(frozen=True)
class Served:
    services: Services
    grpc_port: int
    rest_port: int

    @property
    def controller(self) -> str:
        return f"tcp://127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    async def run(self, *argv: str, env: dict[str, str] | None = None) -> Result:
        """A command against this controller, through the environment as an operator sets it."""
        addresses = {"PGCONTROLLER_CONTROLLER_URI": self.controller, "PGCONTROLLER_REST_URL": self.rest_url}
        return await pgcontroller(*argv, env={**addresses, **(env or {})})


@pytest.fixture
async def served(services: Services) -> AsyncIterator[Served]:
    async with serving(services) as servers:
        yield Served(services, servers.grpc_port, servers.rest_port)


@pytest.fixture
async def secured(services: Services) -> AsyncIterator[Served]:
    async with serving(services, auth_enabled=True) as servers:
        yield Served(services, servers.grpc_port, servers.rest_port)
