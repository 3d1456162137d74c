"""Where the suite puts its clusters: tests/support/scratch.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support import scratch
from tests.support.scratch import SCRATCH_ENV, scratch_dir, scratch_parent


def test_the_variable_names_the_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path))
    made = scratch_dir("probe-")
    assert made.parent == tmp_path and made.name.startswith("probe-")
    # Traversable by the unprivileged user the servers run as when the suite runs as root.
    assert stat.S_IMODE(made.stat().st_mode) == 0o755


def test_a_memory_filesystem_with_room_is_chosen_and_one_without_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(SCRATCH_ENV, raising=False)
    monkeypatch.setattr(scratch, "_MEMORY_FS", tmp_path)
    monkeypatch.setattr(scratch, "_MIN_FREE_BYTES", 1)
    assert scratch_parent() == tmp_path
    stats = os.statvfs(tmp_path)
    monkeypatch.setattr(scratch, "_MIN_FREE_BYTES", stats.f_blocks * stats.f_frsize + 1)
    assert scratch_parent() == Path("/tmp")
    monkeypatch.setattr(scratch, "_MEMORY_FS", tmp_path / "absent")
    monkeypatch.setattr(scratch, "_MIN_FREE_BYTES", 1)
    assert scratch_parent() == Path("/tmp")
