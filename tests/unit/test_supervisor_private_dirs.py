"""A `serve --processes N` supervisor killed with SIGKILL cannot remove its private directory (the
store group's sockets); the next supervisor on the host does, and leaves a live run's alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.wiring.supervisor import PRIVATE_DIR_PREFIX, sweep_private_dirs


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def make_dir(parent: Path, pid: int | str) -> Path:
    path = parent / f"{PRIVATE_DIR_PREFIX}{pid}-abc123"
    (path / "stores").mkdir(parents=True)
    (path / "stores" / "store-0").write_bytes(b"")
    return path


def test_a_dead_supervisors_directory_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    dead = make_dir(tmp_path, dead_pid())
    live = make_dir(tmp_path, os.getpid())
    assert sweep_private_dirs(tmp_path) == [dead]
    assert not dead.exists()
    assert live.exists()


def test_names_it_did_not_make_are_left_alone(tmp_path: Path) -> None:
    # The directories of releases before the pid was in the name, and anything else alike.
    older = tmp_path / f"{PRIVATE_DIR_PREFIX}x7f3k2"
    older.mkdir()
    odd = make_dir(tmp_path, "abc")
    other = tmp_path / "pgcontroller-chaos-1234-x"
    other.mkdir()
    assert sweep_private_dirs(tmp_path) == []
    assert older.exists() and odd.exists() and other.exists()
