"""bench/_pausing.py: the server not being measured is stopped for the other's round and always
continued after it, so a bench that fails mid-round never leaves a server stopped."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._pausing import paused


def _state(pid: int) -> str:
    # The field after the parenthesised command name: R, S, T (stopped), ...
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_for_state(pid: int, wanted: set[str]) -> str:
    deadline = time.monotonic() + 5
    while (state := _state(pid)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        yield started
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_every_listed_process_is_stopped_in_the_block_and_continued_after(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    first, second = sleepers
    with paused([lambda: [first.pid], lambda: [second.pid]]):
        assert _wait_for_state(first.pid, {"T"}) == "T"
        assert _wait_for_state(second.pid, {"T"}) == "T"
    assert _wait_for_state(first.pid, {"S", "R"}) in ("S", "R")
    assert _wait_for_state(second.pid, {"S", "R"}) in ("S", "R")


def test_a_block_that_raises_still_continues_them(sleepers: list[subprocess.Popen[bytes]]) -> None:
    with pytest.raises(RuntimeError), paused([lambda: [p.pid for p in sleepers]]):
        assert _wait_for_state(sleepers[0].pid, {"T"}) == "T"
        raise RuntimeError("the round failed")
    for process in sleepers:
        assert _wait_for_state(process.pid, {"S", "R"}) in ("S", "R")


def test_a_process_gone_before_the_pause_is_skipped(sleepers: list[subprocess.Popen[bytes]]) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = sleepers[0]
    with paused([lambda: [gone.pid, alive.pid]]):
        assert _wait_for_state(alive.pid, {"T"}) == "T"
    assert _wait_for_state(alive.pid, {"S", "R"}) in ("S", "R")
