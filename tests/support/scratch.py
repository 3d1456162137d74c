"""Where the suite's PostgreSQL clusters live: a memory filesystem when the machine has one.

The suite clones a database for nearly every test, and a clone creates a file per relation of
the template (several hundred). On the machines this suite runs on, creating a file under `/tmp`
costs about 0.9 ms of kernel time (under `/dev/shm`, tmpfs, 0.01 ms): a clone there took 300-390
ms of CPU, against 16-36 ms on tmpfs (2026-12-02), several minutes of the suite's two cores.
Nothing a test checks depends on the disk under the cluster: the clusters are throwaway, their
crashes are process kills (which keep what the kernel was handed, on either filesystem), and the
disk-full test mounts a filesystem of its own. The durable clusters of the chaos and crash tests
stay on the disk. A run killed midway leaves its directories behind, as under `/tmp`, but they
hold memory until removed (`rm -rf /dev/shm/pgcontroller-tests-*`) or the machine restarts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Set it to put the clusters elsewhere (a directory every user can traverse).
SCRATCH_ENV = "PGCONTROLLER_TEST_SCRATCH"
_MEMORY_FS = Path("/dev/shm")
# A full suite holds a few clusters at once, each at most about max_wal_size (1 GiB) of WAL and a
# few clones of the template; below this much room the disk is the safer place.
_MIN_FREE_BYTES = 4 << 30


def scratch_parent() -> Path:
    """The directory under which the suite makes its clusters' directories."""
    chosen = os.environ.get(SCRATCH_ENV)
    if chosen:
        return Path(chosen)
    if _MEMORY_FS.is_dir() and os.access(_MEMORY_FS, os.W_OK | os.X_OK):
        stats = os.statvfs(_MEMORY_FS)
        if stats.f_bavail * stats.f_frsize >= _MIN_FREE_BYTES:
            return _MEMORY_FS
    # /tmp is traversable by the unprivileged user PostgreSQL runs as when the suite runs as root.
    return Path("/tmp")


def scratch_dir(prefix: str) -> Path:
    """A fresh directory for a test's clusters, traversable by every user (as root the servers run
    as an unprivileged one); the caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_parent()))
    os.chmod(path, 0o755)
    return path
