"""Plain PostgreSQL clusters of a test's own (initdb, pg_ctl, pg_basebackup), for the tests that
need what the suite's shared server cannot give: WAL archiving, a restore, a streaming standby.

Run as `nobody` when the suite runs as root (PostgreSQL refuses root), in a directory that user
can reach (tests/support/scratch.py: on tmpfs when there is room)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.dev.ha import free_port
from app.embedded_pg import find_bindir
from tests.support.scratch import scratch_dir


@dataclass
class Cluster:
    """A plain PostgreSQL cluster run by pg_ctl as an unprivileged user."""

    data: Path
    port: int
    socket_dir: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        run_as_db_user([str(find_bindir() / "pg_ctl"), *args, "-D", str(self.data), "-w", "-t", "120"])

    def start(self) -> None:
        self.pg_ctl("start", "-l", str(self.data.parent / f"{self.data.name}.log"))

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.pg_ctl("stop", "-m", "fast")

    def configure(self, lines: Sequence[str]) -> None:
        """Appended to postgresql.auto.conf: read at the next start."""
        with (self.data / "postgresql.auto.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n".join(lines) + "\n")

    def basebackup(self, into: Path, *options: str) -> None:
        run_as_db_user(
            [str(find_bindir() / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", "postgres", "-D", str(into), "-c", "fast", *options],
        )  # fmt: skip


def _db_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


def run_as_db_user(argv: list[str]) -> None:
    user = _db_user()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    result = subprocess.run(
        argv, env=env, cwd="/", capture_output=True, text=True, timeout=180,
        user=user.pw_uid if user else None, group=user.pw_gid if user else None,
        extra_groups=[] if user else None,
    )  # fmt: skip
    assert result.returncode == 0, f"{argv[0]} failed: {result.stdout}\n{result.stderr}"


def own(path: Path) -> None:
    """Gives `path` and everything under it to the database user."""
    user = _db_user()
    if user is not None:
        for entry in [path, *path.rglob("*")]:
            os.chown(entry, user.pw_uid, user.pw_gid)


@contextmanager
def cluster_root(prefix: str) -> Iterator[Path]:
    """A directory for a test's clusters; every cluster in it is stopped and it is removed after."""
    path = scratch_dir(prefix)
    own(path)
    try:
        yield path
    finally:
        for data in path.iterdir():
            if (data / "postmaster.pid").exists():
                Cluster(data, 0, path).stop()
        shutil.rmtree(path, ignore_errors=True)


def new_cluster(root: Path, name: str, settings: Sequence[str] = ()) -> Cluster:
    """initdb (trust over loopback, replication included), `settings`, started."""
    cluster = Cluster(root / name, free_port(), root)
    initdb = str(find_bindir() / "initdb")
    run_as_db_user([initdb, "-D", str(cluster.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
    cluster.configure(
        [
            f"port = {cluster.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{root}'",
            *settings,
        ]
    )
    cluster.start()
    return cluster


def copied_cluster(root: Path, name: str, source: Path, settings: Sequence[str]) -> Cluster:
    """A copy of `source` (a base backup) as a cluster on a new port with `settings`, not started."""
    cluster = Cluster(root / name, free_port(), root)
    shutil.copytree(source, cluster.data)
    os.chmod(cluster.data, 0o700)
    cluster.configure([f"port = {cluster.port}", *settings])
    own(cluster.data)
    return cluster
