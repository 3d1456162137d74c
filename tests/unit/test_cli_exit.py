"""How `pgcontroller` ends (app.cli.run): its exit code and flushed output either way, and no
interpreter finalization once a native runtime (obstore's) is loaded. Each case is a fresh
interpreter; an exit handler stands for finalization."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import atexit, sys
if sys.argv[1] == "native":
    import obstore
import app.cli
atexit.register(lambda: print("finalized"))
def main():
    sys.stdout.write("unflushed output")
    logging.getLogger("pgcontroller").error("logged")
    return 3
import logging
logging.basicConfig(stream=sys.stderr)
app.cli.main = main
app.cli.run()
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=60)


def test_with_a_native_runtime_loaded_the_process_ends_without_finalization() -> None:
    ended = _run("native")
    assert ended.returncode == 3
    assert ended.stdout == "unflushed output"
    assert "logged" in ended.stderr


def test_without_one_it_exits_as_usual() -> None:
    ended = _run("plain")
    assert ended.returncode == 3
    assert ended.stdout == "unflushed outputfinalized\n"
    assert "logged" in ended.stderr
