"""What the attack tests of issue 32 measure of a server: its resident memory, and a probe's p99."""

from __future__ import annotations

import statistics
from pathlib import Path


def rss_kb(pid: int | str = "self") -> int:
    """The resident set of process `pid` (this one by default), in KiB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def p99(latencies: list[float]) -> float:
    """The 99th percentile, interpolated (the one value itself when there is one)."""
    if len(latencies) < 2:
        return latencies[0]
    return statistics.quantiles(latencies, n=100, method="inclusive")[98]
