"""Owns the private PostgreSQL cluster of a pgcontroller data dir D: creating, starting and stopping it.
Invariant: D maps to one cluster, never run as root: D/pg, or, if root and `nobody` cannot traverse D's
parents, /var/lib/pgcontroller/<first 16 hex of sha256(realpath D)>/pg, whose path D/pg-location records.
Every connection authenticates with SCRAM-SHA-256 (no `trust`): the superuser's password is generated at
initdb and kept in D/pgpass-admin, the service role's in D/pgpass, both owner-only (0600) .pgpass files
that the URLs name (`passfile=`), so no password is ever in a URL, an argv or a log.

A server is owned by the process that launched it, as D/pg-owner records (that process's pid and start
time, and the postmaster's pid): its owner stops it on exit, and a later start adopts a server whose
owner died without stopping it (SIGKILL) rather than leave it running as if someone else had started it.
`pgcontroller db start` launches servers nobody owns: they run until `db stop`."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import pathlib
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from urllib.parse import quote

from pgurl import write_pgpass

logger = logging.getLogger("pgcontroller")

__all__ = [
    "BINDIR_ENV",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostgresBinariesNotFound",
    "ServerTls",
    "find_bindir",
]

BINDIR_ENV = "PGCONTROLLER_PG_BINDIR"
DB_NAME = "pgcontroller"
# The service's role: owns DB_NAME and everything the migrations create, and is not a superuser.
DB_USER = "pgcontroller"
# The cluster's superuser (initdb's bootstrap role), for administration only.
ADMIN_USER = "postgres"
HOST = "127.0.0.1"
ADMIN_PGPASS = "pgpass-admin"
SERVICE_PGPASS = "pgpass"
OWNER_FILE = "pg-owner"

_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
_DEBIAN_PG_ROOT = pathlib.Path("/usr/lib/postgresql")
_FALLBACK_ROOT = pathlib.Path("/var/lib/pgcontroller")
_UNPRIVILEGED_USER = "nobody"
_START_TIMEOUT_S = 60
_ORPHAN_GRACE_S = 5.0
# sun_path is 108 bytes including the NUL terminator on Linux.
_MAX_SOCKET_PATH = 107
_INSTALL_HINT = (
    "install them with `apt-get install postgresql` (Debian/Ubuntu) or your platform's PostgreSQL server "
    f"package, or put their bin directory on PATH or in {BINDIR_ENV}"
)


class PostgresBinariesNotFound(RuntimeError):
    """initdb, pg_ctl and postgres were not found together in one directory."""


class EmbeddedPostgresError(RuntimeError):
    """The embedded cluster could not be created, started, stopped or reached."""


def _has_server_binaries(directory: pathlib.Path) -> bool:
    return all(
        (directory / name).is_file() and os.access(directory / name, os.X_OK) for name in _SERVER_BINARIES
    )


def _version_key(bindir: pathlib.Path) -> tuple[int, ...]:
    # String order would put "9.6" after "15".
    try:
        return tuple(int(part) for part in bindir.parent.name.split("."))
    except ValueError:
        return (-1,)


def find_bindir() -> pathlib.Path:
    """Return the directory holding initdb, pg_ctl and postgres, all three from the same installation."""
    explicit = os.environ.get(BINDIR_ENV)
    if explicit:
        if _has_server_binaries(pathlib.Path(explicit)):
            return pathlib.Path(explicit)
        # A wrong explicit setting must fail loudly rather than silently pick some other PostgreSQL version.
        raise PostgresBinariesNotFound(
            f"{BINDIR_ENV}={explicit} does not hold initdb, pg_ctl and postgres: {_INSTALL_HINT}."
        )
    candidates: list[pathlib.Path] = []
    initdb = shutil.which("initdb")
    if initdb:
        # All three must come from one directory so pg_ctl and postgres match the version initdb writes;
        # a PATH entry is often a symlink farm (/usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb).
        candidates += [pathlib.Path(initdb).resolve().parent, pathlib.Path(initdb).parent]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(pathlib.Path(out))
    candidates += sorted(_DEBIAN_PG_ROOT.glob("*/bin"), key=_version_key, reverse=True)
    for candidate in candidates:
        if _has_server_binaries(candidate):
            return candidate
    raise PostgresBinariesNotFound(
        f"The PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found: {_INSTALL_HINT}."
    )


@dataclasses.dataclass(frozen=True)
class _User:
    uid: int
    gid: int
    home: str


def _unprivileged_user() -> _User:
    try:
        entry = pwd.getpwnam(_UNPRIVILEGED_USER)
    except KeyError:
        raise EmbeddedPostgresError(
            f"running as root needs the unprivileged user {_UNPRIVILEGED_USER!r} to own the PostgreSQL "
            "server, which refuses to run as root, but that user does not exist"
        ) from None
    return _User(entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _user_for_uid(uid: int, fallback_gid: int) -> _User:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return _User(uid, fallback_gid, "/")
    return _User(entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _can_traverse(path: pathlib.Path, user: _User) -> bool:
    """Whether `user` may search every existing directory on the way to `path` (POSIX bits; ACLs ignored)."""
    real = pathlib.Path(os.path.realpath(path))
    for directory in (*reversed(real.parents), real):
        try:
            st = directory.stat()
        except FileNotFoundError:
            # Missing components are created later by this module, as search-able directories.
            continue
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == user.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _child_env(user: _User | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    # PG* variables (PGHOST, PGPORT, PGDATA, PGSERVICE, ...) would silently redirect the tools; every
    # target is passed explicitly instead. LC_ALL=C keeps messages parseable ("already exists").
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"
    if user is not None:
        env["HOME"] = user.home
    env.update(extra or {})
    return env


def _run(
    argv: Sequence[str],
    user: _User | None,
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    stdin_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    if user is None:
        return subprocess.run(
            list(argv),
            input=stdin_text,
            stdin=subprocess.DEVNULL if stdin_text is None else None,
            capture_output=True,
            text=True,
            env=_child_env(None, env),
            timeout=timeout,
            check=False,
        )
    # cwd="/" because the caller's cwd (e.g. under /root) may be unreadable for the unprivileged user.
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_child_env(user),
        timeout=timeout,
        check=False,
        cwd="/",
        user=user.uid,
        group=user.gid,
        extra_groups=[],
    )


def _client_binary(bindir: pathlib.Path, name: str) -> str:
    local = bindir / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name) or shutil.which(name, path="/usr/bin")
    if found is None:
        raise EmbeddedPostgresError(f"{name} was found neither in {bindir} nor on PATH: {_INSTALL_HINT}")
    return found


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # postgres binds with SO_REUSEADDR, so a port held only by TIME_WAIT leftovers is usable for it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _fresh_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclasses.dataclass(frozen=True)
class _PidFile:
    pid: int
    port: int | None
    status: str


def _read_pid_file(pgdata: pathlib.Path) -> _PidFile | None:
    try:
        lines = (pgdata / "postmaster.pid").read_text(errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None
    # The postmaster fills the file in stages while it starts, so later lines may still be missing; an
    # unreadable pid (0) makes the file count as stale.
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        pid = 0
    try:
        port: int | None = int(lines[3])
    except (IndexError, ValueError):
        port = None
    status = lines[7].strip() if len(lines) > 7 else ""
    return _PidFile(pid if pid > 0 else 0, port, status)


def _proc_link(pid: int, name: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    try:
        stat_line = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state letter follows the parenthesised command name, which may itself contain ") ".
    return stat_line.rpartition(")")[2].split()[:1] in (["Z"], ["X"])


def _started_at(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22): with the pid,
    it names one process for good, as a pid alone does not once it is reused."""
    try:
        stat_line = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat_line.rpartition(")")[2].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _is_cluster_process(pid: int, pgdata: pathlib.Path) -> bool:
    """Whether `pid` is a live postgres process of this cluster; undecidable cases count as live."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    # Without a reaping init (containers) a SIGKILLed postmaster stays a zombie, and after a reboot its pid
    # may belong to an unrelated process: neither may be mistaken for a running server.
    if _is_zombie(pid):
        return False
    cwd = _proc_link(pid, "cwd")
    return cwd is None or cwd == os.path.realpath(pgdata)


def _orphans(pgdata: pathlib.Path) -> list[int]:
    """Live postgres processes still working in `pgdata` (children outliving a killed postmaster)."""
    real = os.path.realpath(pgdata)
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            exe = _proc_link(pid, "exe")
            if (
                exe is not None
                # startswith: after a package upgrade the link reads "postgres (deleted)".
                and os.path.basename(exe).startswith("postgres")
                and _proc_link(pid, "cwd") == real
                and not _is_zombie(pid)
            ):
                found.append(pid)
    return found


def _tail(path: pathlib.Path, offset: int, lines: int = 20) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclasses.dataclass(frozen=True)
class ServerTls:
    cert: pathlib.Path
    key: pathlib.Path
    ca: pathlib.Path | None = None


@dataclasses.dataclass
class EmbeddedPostgres:
    """The private cluster of one pgcontroller data dir; see the module docstring for where it lives."""

    data_dir: pathlib.Path
    # For tests: trades crash safety for speed (fsync, synchronous_commit, full_page_writes off; initdb -N).
    fast: bool = False
    # TLS on the server's port (the files are copied into the cluster, owned by its user, at each launch);
    # with `ca` the server asks clients for a certificate and checks those it gets against it.
    tls: ServerTls | None = None

    def __post_init__(self) -> None:
        # Absolute from the start: the cluster location (and its hash) must not depend on a later chdir.
        self.data_dir = pathlib.Path(self.data_dir).absolute()

    @property
    def pgdata(self) -> pathlib.Path:
        """The real cluster directory. Before the first start() on a new D this is a prediction."""
        recorded = self._recorded_location()
        if recorded is not None:
            return recorded
        default = self.data_dir / "pg"
        # An existing cluster is never abandoned for a fresh one, whatever the permissions say now.
        if os.geteuid() != 0 or (default / "PG_VERSION").exists():
            return default
        if _can_traverse(self.data_dir, _unprivileged_user()):
            return default
        digest = hashlib.sha256(os.path.realpath(self.data_dir).encode()).hexdigest()[:16]
        return _FALLBACK_ROOT / digest / "pg"

    def start(self, *, owned: bool = False, port: int | None = None) -> bool:
        """Make the server run and accept connections; True if this call started it, or, when `owned`,
        if this process owns it now (started or adopted from an owner that died): it is its to stop.

        A server that is already running is reused as it is, whatever its `fast` settings. `owned`: the
        caller stops the server when it ends (serve); without it (`db start`) a server it launches is
        nobody's and runs until `db stop`. `port`: the one it must listen on (a restart after a crash
        keeps the URL its clients hold); by default the previous one if free.
        """
        bindir = find_bindir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            pgdata = self._place_cluster()
            user = self._cluster_user(pgdata)
            if user is not None and not _can_traverse(pgdata.parent, user):
                raise EmbeddedPostgresError(
                    f"the PostgreSQL server must run as uid {user.uid}, which cannot reach {pgdata}: "
                    "make its parent directories searchable (chmod o+x)"
                )
            if not (pgdata / "PG_VERSION").exists():
                self._initdb(bindir, pgdata, user)
            started = not self._await_running_server(pgdata)
            if started:
                self._install_tls(pgdata, user)
                self._launch(bindir, pgdata, user, port)
            ready_port = self._ready_port(pgdata)
            if ready_port is None:
                raise EmbeddedPostgresError(f"the server for {pgdata} stopped right after starting")
            if not self._admin_pgpass.exists():
                self._require_passwords(bindir, pgdata, user, ready_port)
            self._ensure_database(bindir, ready_port)
            return self._settle_owner(pgdata, started, owned)

    def stop(self) -> None:
        """Shut the server down (fast mode, waiting); a no-op when it is not running."""
        if not self.data_dir.is_dir():
            return
        with self._locked():
            pgdata = self.pgdata
            pid_file = _read_pid_file(pgdata)
            if pid_file is None or not _is_cluster_process(pid_file.pid, pgdata):
                return
            pg_ctl = str(find_bindir() / "pg_ctl")
            argv = [pg_ctl, "stop", "-m", "fast", "-w", "-t", str(_START_TIMEOUT_S), "-D", str(pgdata)]
            result = _run(argv, self._cluster_user(pgdata), timeout=_START_TIMEOUT_S + 30)
            remaining = _read_pid_file(pgdata)
            if (
                result.returncode != 0
                and remaining is not None
                and _is_cluster_process(remaining.pid, pgdata)
            ):
                raise EmbeddedPostgresError(f"pg_ctl stop failed for {pgdata}: {result.stderr.strip()}")
            self._owner_file.unlink(missing_ok=True)

    def guard(self) -> subprocess.Popen[bytes]:
        """A process that stops the server once its owner is gone however it went, SIGKILL
        included: it waits on a pipe only the owner holds, which the kernel closes when the owner
        dies, then runs `pg_ctl stop`. An owner that stops the server itself kills its guard first
        (`Popen.kill`). Its own session: a terminal's ^C reaches the owner, which stops in order."""
        pgdata = self.pgdata
        user = self._cluster_user(pgdata)
        # `read` returns at end of file, whichever way the owner ended; the stop follows either way.
        script = 'read -r _; exec "$@" >/dev/null 2>&1'
        argv = [
            "/bin/sh", "-c", script, "pgcontroller-db-guard",
            str(find_bindir() / "pg_ctl"), "stop", "-m", "fast", "-w", "-t", str(_START_TIMEOUT_S),
            "-D", str(pgdata),
        ]  # fmt: skip
        if user is None:
            return subprocess.Popen(
                argv, stdin=subprocess.PIPE, env=_child_env(None), cwd="/", start_new_session=True
            )
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            env=_child_env(user),
            cwd="/",
            start_new_session=True,
            user=user.uid,
            group=user.gid,
            extra_groups=[],
        )

    @contextlib.contextmanager
    def running_for_command(self) -> Iterator[None]:
        """Running while a one-off command uses it: started if it was not, and then stopped again
        after, so a server the operator started is left as it was."""
        started = self.start(owned=True)
        try:
            yield
        finally:
            if started:
                self.stop()

    def is_running(self) -> bool:
        return self._ready_port(self.pgdata) is not None

    def port(self) -> int:
        """The port the running server listens on (its URL's)."""
        port = self._ready_port(self.pgdata)
        if port is None:
            raise EmbeddedPostgresError(f"the embedded PostgreSQL server for {self.data_dir} is not running")
        return port

    def server_pid(self) -> int | None:
        """The postmaster's pid while one runs for this data dir (ready or not), else None."""
        pgdata = self.pgdata
        pid_file = _read_pid_file(pgdata)
        if pid_file is None or not _is_cluster_process(pid_file.pid, pgdata):
            return None
        return pid_file.pid

    @property
    def log_path(self) -> pathlib.Path:
        """The server's own log (startups, crash recovery, errors)."""
        return self.pgdata.parent / "postgres.log"

    def url(self) -> str:
        """The service role's URL; its password comes from the owner-only file the URL names."""
        return self._url(self._service_user(), self._service_pgpass)

    def admin_url(self) -> str:
        """The superuser's URL (creating databases and roles; `db create-analyst`)."""
        return self._url(self._admin_user(), self._admin_pgpass)

    def _admin_user(self) -> str:
        # A cluster converted from trust keeps its bootstrap superuser, DB_USER (see _require_passwords).
        try:
            return self._admin_pgpass.read_text().splitlines()[0].split(":", 4)[3]
        except (OSError, IndexError):
            return ADMIN_USER

    def _service_user(self) -> str:
        return DB_USER

    def _url(self, user: str, passfile: pathlib.Path) -> str:
        return f"postgresql://{user}@{HOST}:{self.port()}/{DB_NAME}?passfile={quote(str(passfile), safe='/')}"

    # -- layout -------------------------------------------------------------------------------------------

    @property
    def _location_file(self) -> pathlib.Path:
        return self.data_dir / "pg-location"

    @property
    def _owner_file(self) -> pathlib.Path:
        return self.data_dir / OWNER_FILE

    @property
    def _port_file(self) -> pathlib.Path:
        return self.data_dir / "pg-port"

    @property
    def _admin_pgpass(self) -> pathlib.Path:
        return self.data_dir / ADMIN_PGPASS

    @property
    def _service_pgpass(self) -> pathlib.Path:
        return self.data_dir / SERVICE_PGPASS

    def _recorded_location(self) -> pathlib.Path | None:
        try:
            text = self._location_file.read_text().strip()
        except FileNotFoundError:
            return None
        if not text or not os.path.isabs(text):
            raise EmbeddedPostgresError(f"{self._location_file} does not hold an absolute path: {text!r}")
        return pathlib.Path(text)

    def _place_cluster(self) -> pathlib.Path:
        pgdata = self.pgdata
        if pgdata == self.data_dir / "pg" or self._location_file.exists():
            return pgdata
        # Only root gets here. The directories above the cluster stay root-owned; only the cluster is chowned.
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        for directory in (_FALLBACK_ROOT, pgdata.parent):
            os.chmod(directory, 0o755)
        tmp = self._location_file.with_name(self._location_file.name + ".tmp")
        tmp.write_text(f"{pgdata}\n")
        os.replace(tmp, self._location_file)
        return pgdata

    def _cluster_user(self, pgdata: pathlib.Path) -> _User | None:
        """Who runs initdb/pg_ctl/postgres: the caller unless root; then the cluster's owner, else nobody."""
        if os.geteuid() != 0:
            return None
        try:
            st = pgdata.stat()
        except FileNotFoundError:
            return _unprivileged_user()
        # A cluster made by an earlier non-root run keeps its owner rather than being chowned away from it.
        return _user_for_uid(st.st_uid, st.st_gid) if st.st_uid != 0 else _unprivileged_user()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Serialises concurrent start()/stop() on one data dir (two processes racing initdb or pg_ctl).
        fd = os.open(self.data_dir / "pg.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- ownership ----------------------------------------------------------------------------------------

    def _settle_owner(self, pgdata: pathlib.Path, launched: bool, owned: bool) -> bool:
        """Records who owns the running server and answers whether this process does (start()'s answer)."""
        pid_file = _read_pid_file(pgdata)
        postmaster = pid_file.pid if pid_file is not None else 0
        owner = self._read_owner()
        mine = owner is not None and owner.get("postmaster_pid") == postmaster
        owner_pid = owner.get("owner_pid") if owner is not None and mine else None
        owner_started = owner.get("owner_started") if owner is not None else None
        owner_alive = isinstance(owner_pid, int) and _started_at(owner_pid) == owner_started
        if not owned:
            # The operator's from now on, unless a live process owns it (it stops it when it ends).
            if launched or not owner_alive:
                self._owner_file.unlink(missing_ok=True)
            return launched
        if launched:
            self._write_owner(postmaster)
            return True
        if not mine:
            return False  # `db start`'s, or launched by a version that recorded no owner: not ours to stop
        if owner_pid == os.getpid():
            return True
        if owner_alive:
            return False
        # Its owner was killed before it could stop it: without adoption it would run on forever.
        logger.warning(
            "adopting the embedded PostgreSQL (pid %d) that pgcontroller process %s started and did not "
            "stop (it was killed); it is stopped when this process ends",
            postmaster,
            owner_pid,
        )
        self._write_owner(postmaster)
        return True

    def _read_owner(self) -> dict[str, object] | None:
        try:
            record = json.loads(self._owner_file.read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _write_owner(self, postmaster: int) -> None:
        me = os.getpid()
        record = {"owner_pid": me, "owner_started": _started_at(me), "postmaster_pid": postmaster}
        tmp = self._owner_file.with_name(OWNER_FILE + ".tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, self._owner_file)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def _initdb(self, bindir: pathlib.Path, pgdata: pathlib.Path, user: _User | None) -> None:
        if pgdata.exists() and any(pgdata.iterdir()):
            raise EmbeddedPostgresError(
                f"{pgdata} is not empty but holds no cluster (no PG_VERSION); move it away"
            )
        # initdb into a sibling and rename, so PG_VERSION in pgdata always means a complete cluster even if
        # this process is killed half-way.
        staging = pgdata.with_name(pgdata.name + ".initdb-tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)
        if user is not None:
            os.chown(staging, user.uid, user.gid)
        password = _new_secret()
        # Recorded before initdb uses it, so a cluster never exists whose password is lost.
        write_pgpass(self._admin_pgpass, [("*", "*", "*", ADMIN_USER, password)])
        with _password_file(pgdata.parent, password, user) as pwfile:
            argv = [
                str(bindir / "initdb"),
                "-D", str(staging),
                "-U", ADMIN_USER,
                # Local sockets and TCP alike (pg_hba.conf gets no `trust` line).
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E", "UTF8",
                "--locale=C",
            ]  # fmt: skip
            if self.fast:
                argv.append("--no-sync")
            result = _run(argv, user, timeout=600)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise EmbeddedPostgresError(
                f"initdb failed for {pgdata} (exit {result.returncode}): {result.stderr.strip()}"
            )
        if pgdata.exists():
            pgdata.rmdir()
        os.rename(staging, pgdata)

    def _ready_port(self, pgdata: pathlib.Path) -> int | None:
        pid_file = _read_pid_file(pgdata)
        if (
            pid_file is None
            or pid_file.port is None
            or pid_file.status not in ("ready", "")
            or not _is_cluster_process(pid_file.pid, pgdata)
        ):
            return None
        return pid_file.port if _accepts_connections(pid_file.port) else None

    def _await_running_server(self, pgdata: pathlib.Path) -> bool:
        """True once a server already running for pgdata accepts connections; False if none is running."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            pid_file = _read_pid_file(pgdata)
            if pid_file is None:
                return False
            if not _is_cluster_process(pid_file.pid, pgdata):
                self._clear_stale_server(pgdata)
                return False
            if self._ready_port(pgdata) is not None:
                return True
            # Alive but not ready: starting up, recovering or shutting down; wait for it to settle.
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(
                    f"postgres pid {pid_file.pid} holds {pgdata} but has not accepted connections for "
                    f"{_START_TIMEOUT_S}s; see {pgdata.parent / 'postgres.log'}"
                )
            time.sleep(0.05)

    def _clear_stale_server(self, pgdata: pathlib.Path) -> None:
        # Children of a SIGKILLed postmaster exit by themselves once they notice; a new postmaster must not
        # run beside them, so give them a moment and then kill them (as a crash would have).
        deadline = time.monotonic() + _ORPHAN_GRACE_S
        while (orphans := _orphans(pgdata)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in orphans:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 2
        while _orphans(pgdata):
            if time.monotonic() > deadline:
                raise EmbeddedPostgresError(f"leftover postgres processes in {pgdata} do not exit")
            time.sleep(0.05)
        # postgres refuses to start while the pid in a lock file exists, which a zombie or a recycled pid
        # does; with no process left in the cluster these files (and the sockets they guard) are stale.
        for leftover in (*pgdata.glob(".s.PGSQL.*"), pgdata / "postmaster.pid"):
            leftover.unlink(missing_ok=True)

    def _launch(
        self, bindir: pathlib.Path, pgdata: pathlib.Path, user: _User | None, fixed_port: int | None
    ) -> None:
        log = pgdata.parent / "postgres.log"
        log.touch(mode=0o640, exist_ok=True)
        if user is not None and log.stat().st_uid != user.uid:
            # pg_ctl opens the log as the server user, who may not be able to create files in the parent.
            os.chown(log, user.uid, user.gid)
        attempts = 3
        while True:
            port = fixed_port if fixed_port is not None else self._choose_port()
            offset = log.stat().st_size
            argv = [
                str(bindir / "pg_ctl"), "start", "-w", "-t", str(_START_TIMEOUT_S),
                "-D", str(pgdata), "-l", str(log), "-o", self._server_options(pgdata, port),
            ]  # fmt: skip
            result = _run(argv, user, timeout=_START_TIMEOUT_S + 30)
            if result.returncode == 0:
                self._port_file.write_text(f"{port}\n")
                return
            tail = _tail(log, offset)
            attempts -= 1
            # Someone may grab the port between our probe and postgres binding it; a new port fixes that
            # (a fixed one may be free again on the next try).
            if attempts == 0 or ("could not bind" not in tail and "Address already in use" not in tail):
                raise EmbeddedPostgresError(
                    f"pg_ctl start failed for {pgdata} (exit {result.returncode}): {result.stderr.strip()}\n"
                    f"--- {log} ---\n{tail}"
                )

    def _install_tls(self, pgdata: pathlib.Path, user: _User | None) -> None:
        if self.tls is None:
            return
        files = {"server.crt": self.tls.cert, "server.key": self.tls.key}
        if self.tls.ca is not None:
            files["client-ca.crt"] = self.tls.ca
        for name, source in files.items():
            target = pgdata / name
            target.unlink(missing_ok=True)
            # The server refuses a key others may read; owner-only from the first byte.
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(pathlib.Path(source).read_bytes())
            if user is not None:
                os.chown(target, user.uid, user.gid)

    def _choose_port(self) -> int:
        # Reusing the previous port keeps the URL stable across restarts when nothing else took it.
        try:
            previous = int(self._port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            previous = 0
        if 0 < previous < 65536 and _port_is_free(previous):
            return previous
        return _fresh_port()

    def _server_options(self, pgdata: pathlib.Path, port: int) -> str:
        socket_dir = str(pgdata)
        if len(f"{socket_dir}/.s.PGSQL.{port}".encode()) > _MAX_SOCKET_PATH:
            # A too-long socket path would abort startup; TCP is all pgcontroller uses anyway.
            socket_dir = ""
        settings = {
            "listen_addresses": HOST,
            "port": str(port),
            "unix_socket_directories": socket_dir,
            "max_connections": "300",
            "shared_buffers": "128MB",
            "fsync": "off" if self.fast else "on",
        }
        if self.fast:
            settings |= {"synchronous_commit": "off", "full_page_writes": "off"}
        if self.tls is not None:
            settings |= {"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key"}
            settings |= {"ssl_min_protocol_version": "TLSv1.2"}
            if self.tls.ca is not None:
                settings["ssl_ca_file"] = "client-ca.crt"
        # pg_ctl hands -o to /bin/sh, hence the quoting.
        return " ".join(f"-c {shlex.quote(f'{key}={value}')}" for key, value in settings.items())

    def _require_passwords(
        self, bindir: pathlib.Path, pgdata: pathlib.Path, user: _User | None, port: int
    ) -> None:
        """Converts a cluster made by an older pgcontroller (initdb --auth=trust, superuser DB_USER):
        DB_USER gets a generated password (in both files: it stays the service's role, and remains a
        superuser, which PostgreSQL's bootstrap role cannot stop being), pg_hba.conf asks every
        connection for SCRAM, and the server reloads it. A new data dir gets the separate roles."""
        from app.store.analysts import scram_sha256_verifier

        # The secret is kept before the server gets it, and a conversion cut short is resumed
        # with the same one (the psql below then works under trust and SCRAM alike).
        tmp_admin = self._admin_pgpass.with_name(self._admin_pgpass.name + ".new")
        if tmp_admin.exists():
            password = _read_pgpass_password(tmp_admin)
        else:
            password = _new_secret()
            write_pgpass(tmp_admin, [("*", "*", "*", DB_USER, password)])
        write_pgpass(self._service_pgpass, [("*", "*", "*", DB_USER, password)])
        verifier = scram_sha256_verifier(password)
        self._psql(bindir, port, DB_USER, tmp_admin, f"ALTER ROLE {DB_USER} PASSWORD '{verifier}';\n")
        hba = pgdata / "pg_hba.conf"
        hba_tmp = pgdata / "pg_hba.conf.new"
        hba_tmp.write_text(_SCRAM_HBA)
        if user is not None:
            os.chown(hba_tmp, user.uid, user.gid)
        os.chmod(hba_tmp, 0o600)
        os.replace(hba_tmp, hba)
        self._psql(bindir, port, DB_USER, tmp_admin, "SELECT pg_reload_conf();\n")
        os.replace(tmp_admin, self._admin_pgpass)

    def _psql(self, bindir: pathlib.Path, port: int, user: str, passfile: pathlib.Path, script: str) -> None:
        argv = [
            _client_binary(bindir, "psql"),
            "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", HOST, "-p", str(port), "-U", user, "-d", "postgres",
        ]  # fmt: skip
        # PGPASSFILE, not a password anywhere: a file name in the environment is no secret.
        result = _run(argv, None, timeout=60, env={"PGPASSFILE": str(passfile)}, stdin_text=script)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"psql as {user} on port {port} failed: {result.stderr.strip()}")

    def _ensure_database(self, bindir: pathlib.Path, port: int) -> None:
        """Makes the service role (a login that is not a superuser, with the password in D/pgpass)
        and its database, owned by it; idempotent, run at every start (one psql, ~20 ms)."""
        if self._admin_user() == DB_USER:
            # A converted cluster: the service's role is the superuser; only the database is ensured.
            self._psql(
                bindir, port, DB_USER, self._admin_pgpass,
                f"SELECT 'CREATE DATABASE {DB_NAME}' WHERE NOT EXISTS "
                f"(SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}') \\gexec\n",
            )  # fmt: skip
            return
        if self._service_pgpass.exists():
            password = _read_pgpass_password(self._service_pgpass)
        else:
            password = _new_secret()
            write_pgpass(self._service_pgpass, [("*", "*", "*", DB_USER, password)])
        # Lazy: the verifier lives with the analysts' code, which needs asyncpg.
        from app.store.analysts import scram_sha256_verifier

        # The server receives only the SCRAM verifier, never the password (nothing to log).
        verifier = scram_sha256_verifier(password)
        script = "\n".join(
            (
                "\\set ON_ERROR_STOP on",
                f"SELECT 'CREATE ROLE {DB_USER} LOGIN' WHERE NOT EXISTS "
                f"(SELECT 1 FROM pg_roles WHERE rolname = '{DB_USER}') \\gexec",
                # Re-stated every start: an older role keeps no extra right and the file stays the truth.
                f"ALTER ROLE {DB_USER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                f"PASSWORD '{verifier}';",
                f"SELECT 'CREATE DATABASE {DB_NAME} OWNER {DB_USER}' WHERE NOT EXISTS "
                f"(SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}') \\gexec",
                f"ALTER DATABASE {DB_NAME} OWNER TO {DB_USER};",
                "",
            )
        )
        self._psql(bindir, port, self._admin_user(), self._admin_pgpass, script)


# What initdb --auth=scram-sha-256 writes, for clusters converted from trust.
_SCRAM_HBA = """# Written by pgcontroller: every connection authenticates with SCRAM-SHA-256 (no trust).
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


def _new_secret() -> str:
    # 256 bits; URL-safe letters hold no ':' or '\\' (the .pgpass separators).
    return secrets.token_urlsafe(32)


def _read_pgpass_password(path: pathlib.Path) -> str:
    line = path.read_text().splitlines()[0]
    return line.split(":", 4)[4]


@contextlib.contextmanager
def _password_file(parent: pathlib.Path, password: str, user: _User | None) -> Iterator[str]:
    """A file holding `password` for initdb --pwfile (never argv), readable only by the user
    initdb runs as, removed as soon as initdb is done."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix=".pgc-pw-", dir=parent))
    path = directory / "pw"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        if user is not None:
            os.chown(directory, user.uid, user.gid)
            os.chown(path, user.uid, user.gid)
        yield str(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
