"""The service image holds every package its entry point imports: the CLI and the service are
imported from just the folders the Dockerfile copies, with PySpark absent as in the default
image (no Docker engine here: this checks the image's import closure, not a build)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_COPY_DIR = re.compile(r"^COPY\s+(\w+)\s+\./\1\s*$", re.MULTILINE)

# Runs in a fresh interpreter: drops the editable install's finder (it would supply any package
# from the checkout), puts the copied folders first, and makes `import pyspark` fail.
_PROBE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path.insert(0, sys.argv[1])
sys.modules["pyspark"] = None
import app.cli, app.main
for module in (app.cli, app.main):
    assert module.__file__.startswith(sys.argv[1]), module.__file__
try:
    app.cli.main(["pipeline", "run", "--help"])
except SystemExit as done:
    assert done.code == 0, done.code
"""


def copied_folders() -> list[str]:
    return _COPY_DIR.findall((REPO / "Dockerfile").read_text())


def test_the_dockerfile_copies_the_code_folders() -> None:
    assert {"app", "workers", "migrations", "sql", "spark"} <= set(copied_folders())


def test_the_cli_and_the_service_import_from_the_copied_folders_alone(tmp_path: Path) -> None:
    for folder in copied_folders():
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert "--db-url" in probe.stdout
