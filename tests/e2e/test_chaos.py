"""The chaos run, short: about a minute and a half of the mixed workload (the real client writing
and running transactions, scales, updates, truncations, reader groups) while a controller and a
segment store are SIGKILLed and PostgreSQL crashes, each restarted; then every check of
bench/chaos.py. Its own PostgreSQL and processes on free ports, its files under tmp_path. The
other fault kinds run in test_chaos_pauses.py (a file of its own, so the two run in parallel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos import FAULT_KINDS, assert_clean, run_logged

# Setup (a durable PostgreSQL, four processes), 80 s of workload, then settle waits each bounded
# by settle_s: generous for a loaded machine, each failing with what it waited for.
pytestmark = [pytest.mark.interop, pytest.mark.timeout(1200)]


async def test_chaos_loses_nothing_duplicates_nothing_and_leaves_nothing_stuck(tmp_path: Path) -> None:
    report, summary = await run_logged(tmp_path, fault_gap_s=(6.0, 10.0), down_s=(0.5, 2.0))
    assert_clean(report, FAULT_KINDS, summary)
