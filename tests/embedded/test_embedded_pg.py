"""Drives app.embedded_pg with the real PostgreSQL server binaries; each cluster is stopped and removed."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from app import embedded_pg
from app.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError, PostgresBinariesNotFound, find_bindir
from tests.support.scratch import scratch_dir

FALLBACK_ROOT = pathlib.Path("/var/lib/pgcontroller")
running_as_root = os.geteuid() == 0


@dataclasses.dataclass
class Sandbox:
    root: pathlib.Path
    clusters: list[EmbeddedPostgres] = dataclasses.field(default_factory=list)

    def cluster(self, data_dir: pathlib.Path | None = None, *, fast: bool = True) -> EmbeddedPostgres:
        pg = EmbeddedPostgres(data_dir or self.root / "data", fast=fast)
        self.clusters.append(pg)
        return pg


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    root = scratch_dir("pgc-embedded-")
    box = Sandbox(root)
    try:
        yield box
    finally:
        try:
            for pg in box.clusters:
                pg.stop()
        finally:
            for pg in box.clusters:
                if pg.pgdata.is_relative_to(FALLBACK_ROOT):
                    shutil.rmtree(pg.pgdata.parent, ignore_errors=True)
            if FALLBACK_ROOT.is_dir() and not any(FALLBACK_ROOT.iterdir()):
                FALLBACK_ROOT.rmdir()
            shutil.rmtree(root, ignore_errors=True)


def psql(url: str, sql: str) -> str:
    bundled = find_bindir() / "psql"
    binary = str(bundled) if bundled.exists() else "/usr/bin/psql"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    result = subprocess.run(
        [binary, url, "-tAc", sql], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def wait_until_dead(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} did not die")


def test_start_creates_cluster_and_database_and_second_start_reuses_server(sandbox: Sandbox) -> None:
    pg = sandbox.cluster()
    with pytest.raises(EmbeddedPostgresError):
        pg.url()

    assert pg.start() is True
    assert pg.pgdata == sandbox.root / "data" / "pg"
    assert (pg.pgdata / "PG_VERSION").is_file()
    url = pg.url()
    # The password is not in the URL: it names the owner-only file that holds it.
    assert url.startswith("postgresql://pgcontroller@127.0.0.1:")
    assert url.endswith(f"/pgcontroller?passfile={sandbox.root}/data/pgpass")
    assert psql(url, "select current_database() || ' ' || current_user") == "pgcontroller pgcontroller"
    if running_as_root:
        assert pg.pgdata.stat().st_uid == pwd.getpwnam("nobody").pw_uid

    again = sandbox.cluster(sandbox.root / "data")
    assert again.start() is False
    assert again.url() == url
    assert again.is_running()
    assert psql(url, "select 1") == "1"


def test_stop_then_start_reuses_cluster(sandbox: Sandbox) -> None:
    pg = sandbox.cluster()
    assert pg.start() is True
    psql(pg.url(), "create table kept (v int); insert into kept values (42)")
    version_mtime = (pg.pgdata / "PG_VERSION").stat().st_mtime_ns

    pg.stop()
    assert not pg.is_running()
    pg.stop()  # stopping a stopped server is a no-op

    began = time.monotonic()
    assert pg.start() is True
    elapsed = time.monotonic() - began
    assert elapsed < 2.0, f"start of an initialised cluster took {elapsed:.2f}s"
    assert (pg.pgdata / "PG_VERSION").stat().st_mtime_ns == version_mtime
    assert psql(pg.url(), "select v from kept") == "42"


def test_start_after_postmaster_was_sigkilled(sandbox: Sandbox) -> None:
    # Durable settings: fast mode's synchronous_commit=off may lose the last commit in a crash, by design.
    pg = sandbox.cluster(fast=False)
    assert pg.start() is True
    psql(pg.url(), "create table survived (v int); insert into survived values (7)")
    pid = int((pg.pgdata / "postmaster.pid").read_text().split()[0])

    os.kill(pid, signal.SIGKILL)
    wait_until_dead(pid)
    assert (pg.pgdata / "postmaster.pid").exists()
    assert not pg.is_running()

    assert pg.start() is True
    assert psql(pg.url(), "select v from survived") == "7"


def test_start_ignores_pid_file_naming_an_unrelated_live_process(sandbox: Sandbox) -> None:
    pg = sandbox.cluster()
    pg.start()
    pg.stop()
    # After a reboot the recorded pid can belong to anything; postgres alone would refuse to start.
    with subprocess.Popen(["sleep", "30"]) as sleeper:
        try:
            (pg.pgdata / "postmaster.pid").write_text(f"{sleeper.pid}\n{pg.pgdata}\n0\n5432\n\n\n\nready\n")
            assert not pg.is_running()
            assert pg.start() is True
            assert psql(pg.url(), "select 1") == "1"
        finally:
            sleeper.kill()


@pytest.mark.skipif(not running_as_root, reason="the /var/lib fallback exists only for root")
def test_root_falls_back_to_var_lib_when_nobody_cannot_traverse(sandbox: Sandbox) -> None:
    locked = sandbox.root / "locked"
    locked.mkdir(mode=0o700)
    data_dir = locked / "data"
    pg = sandbox.cluster(data_dir)

    assert pg.pgdata.is_relative_to(FALLBACK_ROOT)
    assert pg.start() is True
    assert pg.pgdata.is_relative_to(FALLBACK_ROOT)
    assert (data_dir / "pg-location").read_text().strip() == str(pg.pgdata)
    assert not (data_dir / "pg").exists()
    assert pg.pgdata.stat().st_uid == pwd.getpwnam("nobody").pw_uid
    assert psql(pg.url(), "select 1") == "1"

    later = EmbeddedPostgres(data_dir, fast=True)
    assert later.pgdata == pg.pgdata
    later.stop()
    assert not pg.is_running()


def test_stop_without_cluster_is_a_noop(sandbox: Sandbox) -> None:
    pg = sandbox.cluster(sandbox.root / "never-started")
    pg.stop()
    assert not pg.is_running()


def fake_bindir(directory: pathlib.Path) -> pathlib.Path:
    directory.mkdir(parents=True)
    for name in ("initdb", "pg_ctl", "postgres"):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


def test_find_bindir_with_bad_env_dir_raises_install_hint(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PGCONTROLLER_PG_BINDIR", str(empty))
    with pytest.raises(PostgresBinariesNotFound) as excinfo:
        find_bindir()
    message = str(excinfo.value)
    assert "apt-get install postgresql" in message
    assert "PGCONTROLLER_PG_BINDIR" in message


def test_find_bindir_without_any_installation_raises_install_hint(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.delenv("PGCONTROLLER_PG_BINDIR", raising=False)
    monkeypatch.setattr(embedded_pg, "_DEBIAN_PG_ROOT", tmp_path / "no-debian-layout")
    with pytest.raises(PostgresBinariesNotFound, match="apt-get install postgresql"):
        find_bindir()


def test_find_bindir_sources(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_bindir()
    monkeypatch.delenv("PGCONTROLLER_PG_BINDIR", raising=False)

    # PATH holding symlinks leads to the directory they point into.
    links = tmp_path / "links"
    links.mkdir()
    for name in ("initdb", "pg_ctl", "postgres"):
        (links / name).symlink_to(real / name)
    monkeypatch.setenv("PATH", str(links))
    assert find_bindir() == real.resolve()

    # The Debian layout picks the numerically newest version.
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    debian = tmp_path / "postgresql"
    for version in ("9.6", "15", "10"):
        fake_bindir(debian / version / "bin")
    monkeypatch.setattr(embedded_pg, "_DEBIAN_PG_ROOT", debian)
    assert find_bindir() == debian / "15" / "bin"

    # The explicit setting wins over everything else.
    monkeypatch.setenv("PGCONTROLLER_PG_BINDIR", str(real))
    assert find_bindir() == real
