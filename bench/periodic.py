"""The periodic bucket work, one after the other: a retention pass over 10,000 streams
(bench/retention.py, target <= 60 s) and watermarks for 5,000 streams per 10 s period with
metadata-read p99 < 10 ms meanwhile (bench/watermarks.py). Each prints its own figures and
baselines; arguments after `--` are not taken: run the two scripts directly to tune them.

    .venv/bin/python -m bench.periodic
"""

from __future__ import annotations

import subprocess
import sys


def main() -> int:
    status = 0
    for module in ("bench.retention", "bench.watermarks"):
        print(f"== {module}", flush=True)
        status |= subprocess.call([sys.executable, "-m", module])
    return status


if __name__ == "__main__":
    raise SystemExit(main())
