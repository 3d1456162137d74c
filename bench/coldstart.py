"""Cold start of `pgcontroller serve` to ready with the embedded database already initialised,
RSS after start, and SIGTERM-to-exit time.

    .venv/bin/python bench/coldstart.py [--runs 5]

Each run is a fresh process on the same data dir (so the embedded PostgreSQL is started and
stopped by `serve` itself, as `make run` does). Ready = the ready file is written, which
happens after migrations are checked and both servers listen.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.testing.ports import free_port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "app.cli"]
    work = Path(tempfile.mkdtemp(prefix="pgcontroller-coldstart-", dir="/tmp"))
    os.chmod(work, 0o755)
    data_dir = work / "data"
    try:
        subprocess.run([*cli, "db", "upgrade", "--data-dir", str(data_dir)], check=True, cwd=ROOT)
        starts, rss, stops = [], [], []
        for _ in range(args.runs):
            ready = work / "ready.json"
            ready.unlink(missing_ok=True)
            began = time.perf_counter()
            proc = subprocess.Popen(
                [
                    *cli,
                    "serve",
                    # One process, as measured before `--processes` (its default is one per core).
                    "--processes",
                    "1",
                    "--data-dir",
                    str(data_dir),
                    "--grpc-port",
                    str(free_port()),
                    "--rest-port",
                    str(free_port()),
                    "--ready-file",
                    str(ready),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            while not ready.exists():
                if proc.poll() is not None:
                    raise SystemExit(f"serve exited with {proc.returncode}")
                time.sleep(0.005)
            starts.append(time.perf_counter() - began)
            time.sleep(0.5)
            rss.append(rss_mb(proc.pid))
            stop_began = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
            stops.append(time.perf_counter() - stop_began)
            if code != 0:
                raise SystemExit(f"serve exited with {code} after SIGTERM")
        print(f"runs: {args.runs}")
        print(f"cold start to ready (s): median {statistics.median(starts):.2f}  max {max(starts):.2f}")
        print(f"RSS after start (MB):    median {statistics.median(rss):.1f}  max {max(rss):.1f}")
        print(f"SIGTERM to exit (s):     median {statistics.median(stops):.2f}  max {max(stops):.2f}")
    finally:
        subprocess.run([*cli, "db", "stop", "--data-dir", str(data_dir)], cwd=ROOT, check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
