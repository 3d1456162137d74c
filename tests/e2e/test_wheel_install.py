"""A wheel of the checkout, installed as an operator installs it (not editable), runs on its own:
from a directory outside the checkout, `pgcontroller db upgrade` and `serve` find their SQL,
migrations and OpenAPI document in the installed package.

Offline by construction: the wheel is built with this virtualenv's setuptools (no build
isolation, no index), installed with `--no-deps --no-index`, and the third-party packages come
from this virtualenv's site-packages through a plain path line in a `.pth` file. A path line
does not run the editable install's own `.pth` hook, so `app` can only come from the wheel.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from app.store import migrate
from migrations.reporting import reporting_statements
from tests.support.db import with_database
from tests.support.wheel import PIP, build_wheel, run

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers", "migrations", "sql", "spark")
READY_TIMEOUT_S = 30.0
# Not source: VCS and tool folders, caches, earlier builds, local run output (see .gitignore).
_NOT_SOURCE = shutil.ignore_patterns(
    ".*", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", "lake", "spark-warehouse"
)

# Run by the installed interpreter: where each package and its data came from, and sys.path.
_PROBE = """
import importlib, importlib.resources, json, sys
packages = {name: importlib.import_module(name).__file__ for name in sys.argv[1].split(",")}
data = {
    pkg: str(importlib.resources.files(pkg).joinpath(name))
    for pkg, name in [("sql.queries", "scopes.sql"), ("sql.reporting", "10_streams.sql"),
                      ("app.api.rest", "openapi.json"), ("migrations", "script.py.mako")]
}
print(json.dumps({"packages": packages, "data": data, "path": sys.path}))
"""


@dataclass
class Installed:
    venv: Path
    site_packages: Path
    outside: Path  # a working directory outside the checkout
    env: dict[str, str]

    def command(self, name: str) -> Path:
        return self.venv / "bin" / name


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE)
    wheel = build_wheel(source, root / "dist")

    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    run([*PIP, "--python", python, "install", "--no-deps", "--no-index", "-q", wheel])
    site_packages = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site_packages / "third_party_from_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    outside = root / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return Installed(venv, site_packages, outside, {**env, "PYTHONUNBUFFERED": "1"})


@pytest.fixture
async def empty_db_url(pg_admin_url: str) -> AsyncIterator[str]:
    name = f"wheel_{uuid.uuid4().hex[:12]}"
    await _admin(pg_admin_url, f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield with_database(pg_admin_url, name)
    finally:
        await _admin(pg_admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def _admin(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def test_the_installed_packages_and_their_data_come_from_the_wheel(installed: Installed) -> None:
    probe = run(
        [installed.command("python"), "-c", _PROBE, ",".join(PACKAGES)],
        cwd=installed.outside,
        env=installed.env,
    )
    found = json.loads(probe.stdout)
    for name, location in {**found["packages"], **found["data"]}.items():
        assert Path(location).is_relative_to(installed.site_packages), (name, location)
        assert Path(location).is_file(), (name, location)
    # The third-party packages' folder is allowed even when the dev virtualenv sits inside the
    # checkout (`make` puts it in .venv); any other path into the checkout would expose its source.
    third_party = Path(sysconfig.get_paths()["purelib"]).resolve()
    into_checkout = [
        p
        for p in found["path"]
        if p and Path(p).resolve() != third_party and Path(p).resolve().is_relative_to(REPO)
    ]
    assert not into_checkout, found["path"]


async def test_db_upgrade_and_serve_from_outside_the_checkout(
    installed: Installed, empty_db_url: str
) -> None:
    upgrade = await asyncio.to_thread(
        run,
        [installed.command("pgcontroller"), "db", "upgrade", "--db-url", empty_db_url],
        cwd=installed.outside,
        env=installed.env,
    )
    conn = await asyncpg.connect(empty_db_url)
    try:
        assert await migrate.current_revision(conn) == migrate.head_revision(), upgrade.stderr
        views = await conn.fetchval("SELECT count(*) FROM pg_views WHERE schemaname = 'reporting'")
        assert views == len(reporting_statements())
    finally:
        await conn.close()

    ready = installed.outside / "ready.json"
    log_path = installed.outside / "serve.log"
    with open(log_path, "wb") as log_file:  # noqa: ASYNC230 - a local file, handed to the child
        process = await asyncio.create_subprocess_exec(
            installed.command("pgcontroller"),
            "serve",
            "--db-url",
            empty_db_url,
            "--grpc-port",
            "0",
            "--rest-port",
            "0",
            "--ready-file",
            str(ready),
            cwd=installed.outside,
            env=installed.env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
        while not ready.exists():
            assert process.returncode is None, log_path.read_text()
            assert asyncio.get_running_loop().time() < deadline, log_path.read_text()
            await asyncio.sleep(0.05)
        base = f"http://127.0.0.1:{json.loads(ready.read_text())['rest_port']}"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/v1/scopes", json={"scopeName": "fromwheel"}) as response:
                assert response.status == 201, await response.text()
            async with http.get(f"{base}/v1/scopes") as response:
                assert {"scopeName": "fromwheel"} in (await response.json())["scopes"]
            async with http.get(f"{base}/v1/openapi.json") as response:
                shipped = await response.read()
        assert shipped == (REPO / "app" / "api" / "rest" / "openapi.json").read_bytes()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=10)
    assert code == 0, log_path.read_text()
