"""The service image holds every package its entry point imports and every file it reads: the
image installs the wheel built from just the files the Dockerfile copies, so that wheel is built
here from the same files and the CLI and the service are imported from its contents alone, with
PySpark absent as in the default image (no Docker engine here: this checks what the image
installs, not a build)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from app.api.rest.health import ROUTES, get_readiness
from tests.support.wheel import build_wheel

REPO = Path(__file__).resolve().parents[2]
_COPY_DIR = re.compile(r"^COPY\s+(\w+)\s+\./\1\s*$", re.MULTILINE)
_COPY_FILES = re.compile(r"^COPY\s+((?:[\w.-]+\s+)+)\./\s*$", re.MULTILINE)
_HEALTHCHECK_URL = re.compile(r"^HEALTHCHECK .*'http://127\.0\.0\.1:9091(/[\w/]+)'", re.MULTILINE)

# Runs in a fresh interpreter: drops the editable install's finder (it would supply any package
# from the checkout), puts the wheel's contents first, and makes `import pyspark` fail. Reading
# the SQL, the migrations and the OpenAPI document proves the wheel carries them.
_PROBE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path.insert(0, sys.argv[1])
sys.modules["pyspark"] = None
import app.cli, app.main, migrations.reporting, sql.queries
from app.api.rest.app import load_openapi
from app.store import migrate
for module in (app.cli, app.main, migrations.reporting, sql.queries):
    assert module.__file__.startswith(sys.argv[1]), module.__file__
assert str(migrate.migrations_dir()).startswith(sys.argv[1]), migrate.migrations_dir()
assert migrate.head_revision()
assert migrations.reporting.reporting_statements()
assert load_openapi()
try:
    app.cli.main(["pipeline", "run", "--help"])
except SystemExit as done:
    assert done.code == 0, done.code
"""


def dockerfile() -> str:
    return (REPO / "Dockerfile").read_text()


def copied_folders() -> list[str]:
    return _COPY_DIR.findall(dockerfile())


def copied_files() -> list[str]:
    return [name for group in _COPY_FILES.findall(dockerfile()) for name in group.split()]


def test_the_dockerfile_copies_the_code_folders() -> None:
    assert {"app", "workers", "migrations", "sql", "spark"} <= set(copied_folders())
    assert "pyproject.toml" in copied_files()


def test_the_cli_and_the_service_import_from_the_wheel_of_the_copied_files(tmp_path: Path) -> None:
    source = tmp_path / "source"
    for folder in copied_folders():
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in copied_files():
        shutil.copy2(REPO / name, source / name)
    installed = tmp_path / "installed"
    # A pure-Python wheel's contents are what `pip install` puts in site-packages.
    with zipfile.ZipFile(build_wheel(source, tmp_path / "dist")) as wheel:
        wheel.extractall(installed)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, str(installed)],
        cwd=installed,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert "--db-url" in probe.stdout


def test_the_healthcheck_asks_the_readiness_route() -> None:
    paths = _HEALTHCHECK_URL.findall(dockerfile())
    assert len(paths) == 1, paths
    assert [route.handler for route in ROUTES if route.path == paths[0]] == [get_readiness]
