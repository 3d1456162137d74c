from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.dev import ha, partition
from app.testing.served import ServedProcess, start_served
from tests.support.scratch import scratch_dir


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    instance = await start_served(tmp_path, "--db-url", db_url)
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()


@pytest.fixture
def ha_cluster(tmp_path: Path) -> Iterator[ha.HaState]:
    """`pgcontroller dev ha`'s cluster (etcd, three nodes under Patroni), purged after the test;
    its Patroni and etcd logs are kept in the test's directory (`ha-logs`)."""
    # Not under tmp_path: PostgreSQL and etcd run as an unprivileged user, who cannot reach
    # pytest's root-only directories.
    root = scratch_dir("pgcontroller-ha-")
    try:
        yield ha.up(root)
    finally:
        with contextlib.suppress(ha.HaError):  # a test's partition left in place, or no cluster
            partition.heal(ha.HaState.load(root))
        ha.down(root, purge=False)
        logs = tmp_path / "ha-logs"
        logs.mkdir(exist_ok=True)
        for log in [root / "etcd.log", *root.glob("node*/patroni.log")]:
            if log.exists():
                shutil.copy(log, logs / f"{log.parent.name if log.name == 'patroni.log' else 'etcd'}.log")
        shutil.rmtree(root, ignore_errors=True)
