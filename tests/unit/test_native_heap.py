"""app/native_heap.py: freed large buffers are reused in place rather than faulted in afresh, and
an operator's own glibc tuning is left alone. Each case runs in a fresh interpreter, since the
thresholds hold for the rest of a process's life."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from app.native_heap import OPERATOR_VARIABLES

ROOT = Path(__file__).resolve().parents[2]

# A read reply's life in the store, six times over: several 2 MiB buffers alive at once (the
# rows from PostgreSQL, the reply, the transport's copy), then all freed; the minor page faults
# of one such burst, after a warm-up.
BURSTS = """
import json, resource, sys
from app.native_heap import keep_large_buffers
applied = keep_large_buffers() if sys.argv[1] == "tuned" else None
def burst():
    held = [bytearray(2 * 1024 * 1024) for _ in range(6)]
    del held
for _ in range(5):
    burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    burst()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50
print(json.dumps({"applied": applied, "faults": faults}))
"""


# Twenty connections' frame buffers growing in turn, 256 KiB at a time, to Pravega's largest frame
# (16 MiB), as clients stalling in huge frames make them (tests/e2e/test_hostile_store_port.py);
# the RSS beyond the 320 MiB they hold, and what stays mapped once they are freed.
FRAMES = """
import json, os, sys
from app.native_heap import keep_large_buffers
applied = keep_large_buffers() if sys.argv[1] == "tuned" else None
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
chunk = bytes(256 * 1024)
before = rss_mib()
frames = [bytearray() for _ in range(20)]
for _ in range(64):
    for frame in frames:
        frame += chunk
held = rss_mib()
del frames
kept = rss_mib() - before
print(json.dumps({"applied": applied, "beyond_held_mib": held - before - 320, "kept_mib": kept}))
"""


def _run(mode: str, script: str = BURSTS, **extra_env: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in (*OPERATOR_VARIABLES, "GLIBC_TUNABLES")}
    env.update(extra_env, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", script, mode], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_freed_buffers_are_reused_without_page_faults() -> None:
    plain = _run("plain")
    tuned = _run("tuned")
    # 12 MiB touched a burst is 3,072 pages: glibc's defaults fault nearly all of them in again.
    assert isinstance(plain["faults"], float) and plain["faults"] > 1000, plain
    assert tuned["applied"] is True
    assert isinstance(tuned["faults"], float) and tuned["faults"] < 50, tuned


def test_buffers_grown_past_the_threshold_are_mapped_on_their_own() -> None:
    """With the mmap threshold at glibc's maximum (32 MiB, trim 128 MiB: stop 62) the frames
    cost 100 MiB beyond what they held and kept 236 MiB mapped after; with glibc's defaults 0 and
    16 MiB; with the module's thresholds 32 and 59."""
    tuned = _run("tuned", FRAMES)
    assert tuned["applied"] is True
    assert isinstance(tuned["beyond_held_mib"], int) and tuned["beyond_held_mib"] < 64, tuned
    assert isinstance(tuned["kept_mib"], int) and tuned["kept_mib"] < 100, tuned


def test_an_operators_malloc_tuning_is_left_alone() -> None:
    asked = [
        {"MALLOC_TRIM_THRESHOLD_": "1"},
        {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "1"},
        {"GLIBC_TUNABLES": "glibc.pthread.mutex_spin_count=100:glibc.malloc.trim_threshold=1"},
    ]
    for env in asked:
        result = _run("tuned", **env)
        assert result["applied"] is False, (env, result)
        # What the operator asked for holds: a trim threshold of one byte gives every page back.
        assert isinstance(result["faults"], float) and result["faults"] > 1000, (env, result)


def test_other_glibc_tunables_do_not_stop_it() -> None:
    result = _run("tuned", GLIBC_TUNABLES="glibc.pthread.mutex_spin_count=100")
    assert result["applied"] is True
    assert isinstance(result["faults"], float) and result["faults"] < 50, result
