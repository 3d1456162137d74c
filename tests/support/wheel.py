"""Builds pgcontroller's wheel offline: this virtualenv's setuptools, no build isolation, no
package index, no version check, so a build never touches the network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]


def run(
    args: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel of the project in `source`, a copy: building writes build/ and *.egg-info into
    the folder it builds, which must not be the checkout (concurrent runs would race there)."""
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", out, source])
    wheels = list(out.glob("pgcontroller-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]
