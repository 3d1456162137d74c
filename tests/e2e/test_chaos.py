"""The chaos run, short: about a minute and a half of the mixed workload (the real client writing
and running transactions, scales, updates, truncations, reader groups) while a controller and a
segment store are SIGKILLed and PostgreSQL crashes, each restarted; then every check of
bench/chaos.py. Its own PostgreSQL and processes on free ports, its files under tmp_path."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from tests.support.chaos import FAULT_KINDS, ChaosOptions, run_chaos

# Setup (a durable PostgreSQL, four processes), 80 s of workload, then settle waits each bounded
# by settle_s: generous for a loaded machine, each failing with what it waited for.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(1200)]


async def test_chaos_loses_nothing_duplicates_nothing_and_leaves_nothing_stuck(tmp_path: Path) -> None:
    # Only the fault timing is random: the seed is printed (and settable) to replay a failure.
    seed = int(os.environ.get("CHAOS_SEED") or secrets.randbelow(2**31))
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(line, flush=True)  # pytest shows it if the run itself fails

    options = ChaosOptions(
        seconds=80, seed=seed, work=tmp_path, streams=2, writers=2, txn_workers=1, writer_rate=50,
        warmup_s=5, quiet_s=10, fault_gap_s=(6.0, 10.0), down_s=(0.5, 2.0), settle_s=150,
        log=log,
    )  # fmt: skip
    report = await run_chaos(options)
    summary = "\n".join([*lines, *report.lines()])
    print(summary)
    assert not report.failures(), summary
    # Every kind of fault happened and the workload went on around it.
    assert {f.kind for f in report.faults} == set(FAULT_KINDS), summary
    assert all(f.back is not None for f in report.faults), summary
    for kind in ("events", "txn-committed", "txn-aborted", "scale-completed", "update", "truncate"):
        assert report.acked[kind] > 0, f"no {kind} acknowledged\n{summary}"
    assert report.acked["reader-group-created"] > 0, summary
    assert report.events_read >= report.acked["events"], summary
