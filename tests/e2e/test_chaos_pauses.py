"""The chaos run with the fault kinds beyond the issue's three: a segment store and a controller
frozen (SIGSTOP) and thawed, a controller killed together with a store, and one child of a `serve
--processes 2` controller killed (its supervisor restarts it); then every check of bench/chaos.py.
Its own PostgreSQL and processes on free ports, its files under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos import MORE_FAULT_KINDS, assert_clean, run_logged

pytestmark = [pytest.mark.interop, pytest.mark.timeout(1200)]


async def test_chaos_survives_frozen_processes_killed_pairs_and_a_killed_child(tmp_path: Path) -> None:
    """A store and a controller each frozen (SIGSTOP) past the store expiry (10 s) and the member
    TTL (5 s), so their containers and buckets move while they still hold their sockets and
    sessions, then thawed; a controller killed together with a store; and, the second controller
    being `serve --processes 2` (each child with the embedded store behind the shared ports), one
    of its children killed while writers, transactions and readers go through those ports."""
    # The four faults fit the 80 s window for any seed when every victim is back as planned (gaps
    # of at most 5 + 8 + 8 + 8 s, pauses of at most 13 s, the double kill down at most 2 s); on a
    # loaded machine a restart can take 25 s more, and the run extends the workload (to at most
    # 160 s) until each kind has happened once.
    report, summary = await run_logged(
        tmp_path, fault_gap_s=(5.0, 8.0), down_s=(0.5, 2.0), pause_s=(11.0, 13.0), processes=2,
        fault_kinds=("pause-store", "controller+store", "pause-controller", "child"),
    )  # fmt: skip
    assert_clean(report, MORE_FAULT_KINDS, summary)
