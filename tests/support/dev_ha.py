"""`pgcontroller dev ha ...` run as a user runs it: a process of its own, its output captured."""

from __future__ import annotations

import subprocess
import sys


def dev_ha(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "dev", "ha", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
