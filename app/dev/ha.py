"""A highly available PostgreSQL on one machine, for tests, benches and trying failover: etcd and
three PostgreSQL 15 nodes under Patroni on loopback ports, in synchronous mode (a commit is
acknowledged once a synchronous standby has it), with short timeouts so a failover takes seconds.

`pgcontroller dev ha up` starts it (installing Debian's `etcd-server`, and Patroni from PyPI in a
virtual environment of its own, first when they are missing and we are root), `status` shows its
members, `down` stops it (`--purge` removes its files). Its state (ports, passwords, process ids)
is a JSON file in its directory, so another process (a test, `down`) can find and drive it.
PostgreSQL refuses to run as root, so Patroni and etcd run as the `postgres` user (Debian's
PostgreSQL packages create it), or `nobody` without it.

Everything here is for one machine: the production recipe (docs/ha.md) runs the same pieces on
three.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import random
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.embedded_pg import find_bindir

HOST = "127.0.0.1"
SCOPE = "pgcontroller-ha"
NODES = 3
DATABASE = "pgcontroller"
SERVICE_USER = "pgcontroller"
# Patroni's rule: loop_wait + 2 * retry_timeout <= ttl. A dead leader's key expires after ttl,
# and a standby takes over within a loop after that.
TTL_S = 6
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 2
_PACKAGES = ("etcd-server", "etcd-client")
# Patroni from PyPI, not Debian's 3.0.2: that one, resumed after a pause longer than ttl (a hung
# agent, SIGSTOP), overwrites the leader key in etcd (fixed in Patroni 3.0.3, patroni/patroni#2689)
# and takes the leadership back from the standby promoted meanwhile, which it then rewinds,
# discarding what that one had acknowledged (seen in tests/e2e/test_ha_frozen_patroni.py).
PATRONI_VERSION = "3.0.4"
PATRONI_HOME = Path("/opt/pgcontroller") / f"patroni-{PATRONI_VERSION}"
SYSTEM_PYTHON = "/usr/bin/python3"
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 30.0


class HaError(RuntimeError):
    """The cluster cannot be started, found or stopped; the message says what to do."""


@dataclass(frozen=True)
class NodePorts:
    name: str
    postgres: int
    rest: int

    @property
    def side(self) -> str:
        """A loopback address of this node's own: its PostgreSQL listens on it besides HOST, and
        its Patroni reaches etcd through it, so `partition` can cut the node's traffic with
        everyone else (on HOST) and leave whatever is given this address on the node's side."""
        return f"127.0.1.{int(self.name.removeprefix('node')) + 1}"


@dataclass
class HaState:
    root: str
    etcd_client: int
    etcd_peer: int
    nodes: list[NodePorts]
    superuser_password: str
    replication_password: str
    service_password: str
    pids: dict[str, int]

    @property
    def path(self) -> Path:
        return Path(self.root)

    def service_url(self) -> str:
        """The service's URL: every node, the writable one chosen (libpq's multi-host form)."""
        hosts = ",".join(f"{HOST}:{n.postgres}" for n in self.nodes)
        return (
            f"postgresql://{SERVICE_USER}:{self.service_password}@{hosts}/{DATABASE}"
            "?target_session_attrs=read-write"
        )

    def side_url(self, node: NodePorts) -> str:
        """The service's URL to `node` alone, through its side address: a client given it stays
        on the node's side of a `partition`."""
        return (
            f"postgresql://{SERVICE_USER}:{self.service_password}@{node.side}:{node.postgres}/{DATABASE}"
            "?target_session_attrs=read-write"
        )

    def save(self) -> None:
        data = asdict(self)
        path = self.path / "state.json"
        path.write_text(json.dumps(data, indent=2))
        path.chmod(0o600)

    @classmethod
    def load(cls, root: Path) -> HaState:
        try:
            data = json.loads((root / "state.json").read_text())
        except FileNotFoundError:
            raise HaError(f"no HA cluster in {root} (start one with `pgcontroller dev ha up`)") from None
        data["nodes"] = [NodePorts(**n) for n in data["nodes"]]
        return cls(**data)


# Ports handed out by this process, never twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range: a port bind(0) picks is in that range, and
    an outgoing connection (Patroni's to etcd, say) could take it before the node listens on it
    (seen: a node's PostgreSQL failed with "Address already in use" and the cluster never came up)."""
    ephemeral_low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(10_000, ephemeral_low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind((HOST, port))
            _HANDED_OUT.add(port)
            return port
    raise HaError(f"no free port between 10000 and {ephemeral_low}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _owner() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise HaError("neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL as")


def patroni_command() -> str:
    return str(PATRONI_HOME / "bin" / "patroni")


def ensure_installed() -> None:
    """Debian's etcd and Patroni PATRONI_VERSION in a virtual environment of its own (readable by
    the user that runs it), installed when missing (as root); otherwise the commands to run."""
    if shutil.which("etcd") is None:
        _install(["apt-get", "install", "-y", "--no-install-recommends", *_PACKAGES], "etcd")
    if not _installed_marker().exists():
        _install_patroni()


def _install(argv: list[str], what: str) -> None:
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HaError(f"{what} is missing: install it with `apt-get install {' '.join(_PACKAGES)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update"], argv):
        _run_step(step, env)


def _install_patroni() -> None:
    if os.geteuid() != 0:
        raise HaError(
            f"Patroni {PATRONI_VERSION} is missing: as root, `{SYSTEM_PYTHON} -m venv {PATRONI_HOME} && "
            f"{PATRONI_HOME}/bin/pip install 'patroni[etcd3]=={PATRONI_VERSION}' psycopg2-binary`"
        )
    # Made where it lives (a venv's scripts name their interpreter by path); the marker is written
    # last, so an install cut short is redone from scratch, never half used.
    shutil.rmtree(PATRONI_HOME, ignore_errors=True)
    PATRONI_HOME.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The system's interpreter: the venv's scripts name it, and the user that runs Patroni must
    # reach it (an interpreter under /root, pyenv's say, is out of its reach).
    _run_step([SYSTEM_PYTHON, "-m", "venv", str(PATRONI_HOME)], env)
    pip = str(PATRONI_HOME / "bin" / "pip")
    _run_step([pip, "install", "-q", f"patroni[etcd3]=={PATRONI_VERSION}", "psycopg2-binary"], env)
    for directory in (PATRONI_HOME.parent, PATRONI_HOME):
        directory.chmod(0o755)
    _installed_marker().touch()


def _installed_marker() -> Path:
    return PATRONI_HOME / "installed"


def _run_step(argv: list[str], env: Mapping[str, str]) -> None:
    done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise HaError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[-2000:]}")


def _patroni_config(state: HaState, node: NodePorts) -> dict[str, Any]:
    node_dir = state.path / node.name
    return {
        "scope": SCOPE,
        "name": node.name,
        "log": {"level": "INFO"},  # to stderr, which is the node's patroni.log
        "restapi": {"listen": f"{HOST}:{node.rest}", "connect_address": f"{HOST}:{node.rest}"},
        # Through the node's side address, and only there (use_proxies: no discovery of etcd's
        # advertised URL, which would go around a partition).
        "etcd3": {"hosts": [f"{node.side}:{state.etcd_client}"], "use_proxies": True},
        "bootstrap": {
            "dcs": {
                "ttl": TTL_S,
                "loop_wait": LOOP_WAIT_S,
                "retry_timeout": RETRY_TIMEOUT_S,
                "maximum_lag_on_failover": 1024 * 1024,
                "synchronous_mode": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "wal_log_hints": "on",
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "max_connections": 300,
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "data-checksums"],
            "pg_hba": [
                # Loopback only; the side addresses (127.0.1.x) included.
                "host replication replicator 127.0.0.0/8 scram-sha-256",
                "host all all 127.0.0.0/8 scram-sha-256",
            ],
        },
        "postgresql": {
            "listen": f"{HOST},{node.side}:{node.postgres}",
            "connect_address": f"{HOST}:{node.postgres}",
            # Patroni's own connection to its PostgreSQL is local, never cut by a partition.
            "use_unix_socket": True,
            "data_dir": str(node_dir / "data"),
            "bin_dir": str(find_bindir()),
            "pgpass": str(node_dir / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": state.superuser_password},
                "replication": {"username": "replicator", "password": state.replication_password},
                "rewind": {"username": "postgres", "password": state.superuser_password},
            },
            "parameters": {"unix_socket_directories": str(node_dir)},
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
    }


# The processes this one started, kept so they are reaped (and not reported as leaked) when they
# end; a cluster started by another process is driven by its pids alone.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(argv: list[str], log_path: Path, user: pwd.struct_passwd, env: dict[str, str]) -> int:
    # Root hands the process to `user`; anyone else runs it as themselves.
    as_root = os.geteuid() == 0
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            env=env,
            start_new_session=True,  # outlives `dev ha up`; `down` signals it
            user=user.pw_uid if as_root else None,
            group=user.pw_gid if as_root else None,
            extra_groups=[] if as_root else None,
        )
    _CHILDREN[process.pid] = process
    return int(process.pid)


def _child_env(user: pwd.struct_passwd) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "ETCD", "PATRONI"))}
    return {**env, "HOME": user.pw_dir, "LC_ALL": "C.UTF-8"}


def up(root: Path) -> HaState:
    """Starts etcd and the three nodes (a cluster already in `root` is started again as it was),
    waits for a leader and a synchronous standby, and makes the service's role and database."""
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    # Checked before anything is installed: the packages' user (postgres) and the fallback
    # (nobody) are both "others" to a root-only directory.
    _check_traversable(root, _owner())
    ensure_installed()
    user = _owner()
    try:
        state = HaState.load(root)
    except HaError:
        state = HaState(
            root=str(root),
            etcd_client=free_port(),
            etcd_peer=free_port(),
            nodes=[NodePorts(f"node{i}", free_port(), free_port()) for i in range(NODES)],
            superuser_password=secrets.token_hex(16),
            replication_password=secrets.token_hex(16),
            service_password=secrets.token_hex(16),
            pids={},
        )
    if any(_alive(pid) for pid in state.pids.values()):
        raise HaError(f"the HA cluster in {root} is running already (`pgcontroller dev ha down` first)")
    os.chmod(root, 0o755)
    env = _child_env(user)
    for directory in (root / "etcd", *(root / n.name for n in state.nodes)):
        directory.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            os.chown(directory, user.pw_uid, user.pw_gid)
        directory.chmod(0o700)
    state.pids = {"etcd": _spawn(_etcd_argv(state), root / "etcd.log", user, env)}
    state.save()
    _wait(lambda: _etcd_healthy(state), "etcd to answer", root / "etcd.log", pids=(state.pids["etcd"],))
    for node in state.nodes:
        config = root / node.name / "patroni.yml"
        config.write_text(json.dumps(_patroni_config(state, node)))  # YAML is a superset of JSON
        if os.geteuid() == 0:
            os.chown(config, user.pw_uid, user.pw_gid)
        config.chmod(0o600)
        log = root / node.name / "patroni.log"
        state.pids[node.name] = _spawn([patroni_command(), str(config)], log, user, env)
        state.save()
    _wait(
        lambda: _ready(state),
        "a leader and a synchronous standby",
        root / "node0" / "patroni.log",
        pids=tuple(state.pids.values()),
    )
    _make_service_database(state)
    return state


def _check_traversable(root: Path, user: pwd.struct_passwd) -> None:
    """PostgreSQL and etcd run as `user`, who must reach `root` (a directory under a root-only
    one, such as pytest's, is out of its reach)."""
    if os.geteuid() != 0:
        return
    for directory in root.parents:
        mode = directory.stat().st_mode
        if not mode & 0o001 and not (directory.stat().st_gid == user.pw_gid and mode & 0o010):
            raise HaError(
                f"{root} is out of reach of the user {user.pw_name!r} that runs PostgreSQL: "
                f"{directory} is not searchable by others; choose a directory under /tmp or /srv"
            )


def _etcd_argv(state: HaState) -> list[str]:
    client, peer = f"http://{HOST}:{state.etcd_client}", f"http://{HOST}:{state.etcd_peer}"
    sides = [f"http://{node.side}:{state.etcd_client}" for node in state.nodes]
    return [
        "etcd",
        "--name=ha",
        f"--data-dir={state.path / 'etcd'}",
        f"--listen-client-urls={','.join([client, *sides])}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=ha={peer}",
    ]


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


def _get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:  # Patroni answers 503 with a body on a replica's /primary
        return json.loads(exc.read() or b"null")
    except (OSError, ValueError):
        return None


def _etcd_healthy(state: HaState) -> bool:
    health = _get_json(f"http://{HOST}:{state.etcd_client}/health")
    return isinstance(health, dict) and health.get("health") == "true"


def members(state: HaState) -> list[dict[str, Any]]:
    """Patroni's view of the members (name, role, state, lag), from whichever node answers."""
    for node in state.nodes:
        cluster = _get_json(f"http://{HOST}:{node.rest}/cluster")
        if isinstance(cluster, dict) and "members" in cluster:
            return list(cluster["members"])
    return []


def leader(state: HaState) -> NodePorts | None:
    for member in members(state):
        if member.get("role") == "leader" and member.get("state") == "running":
            return next((n for n in state.nodes if n.name == member["name"]), None)
    return None


def _ready(state: HaState) -> bool:
    roles = {m.get("role") for m in members(state) if m.get("state") in ("running", "streaming")}
    return "leader" in roles and "sync_standby" in roles


def wait_ready(state: HaState, timeout_s: float = _START_TIMEOUT_S) -> None:
    """Until the cluster has a leader and a synchronous standby again (after a node rejoined)."""
    _wait(
        lambda: _ready(state),
        "a leader and a synchronous standby",
        state.path / "node0" / "patroni.log",
        timeout_s,
    )


def _wait(
    check: Callable[[], bool],
    what: str,
    log: Path,
    timeout_s: float = _START_TIMEOUT_S,
    *,
    pids: tuple[int, ...] = (),
) -> None:
    """Until `check()`; a timeout, or the death of one of `pids`, is an error quoting `log`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if not all(_alive(pid) for pid in pids):
            raise HaError(f"the process waited on for {what} ended; {log} ends:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise HaError(f"timed out after {timeout_s:.0f} s waiting for {what}; {log} ends:\n{_tail(log)}")
        time.sleep(0.2)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


def _psql(state: HaState, node: NodePorts, sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        [
            str(find_bindir() / "psql"),
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            HOST,
            "-p",
            str(node.postgres),
            "-U",
            "postgres",
            "-d",
            database,
            "-c",
            sql,
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
            "PGPASSWORD": state.superuser_password,
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if done.returncode != 0:
        raise HaError(f"psql on {node.name}: {done.stderr.strip()}")
    return done.stdout.strip()


def _without_pg(environ: Mapping[str, str]) -> dict[str, str]:
    # PGHOST, PGPORT, ... would silently redirect psql; every target is passed explicitly.
    return {k: v for k, v in environ.items() if not k.startswith("PG")}


def _make_service_database(state: HaState) -> None:
    node = leader(state)
    if node is None:
        raise HaError("the cluster has no leader")
    password = state.service_password.replace("'", "''")
    exists = _psql(state, node, f"SELECT 1 FROM pg_roles WHERE rolname = '{SERVICE_USER}'")
    if not exists:
        _psql(state, node, f"CREATE ROLE {SERVICE_USER} LOGIN PASSWORD '{password}'")
    if not _psql(state, node, f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'"):
        _psql(state, node, f"CREATE DATABASE {DATABASE} OWNER {SERVICE_USER}")
    # Until every node has replayed it: a client given all the hosts (the multi-host URL) that
    # reaches a standby without the database is refused outright ("does not exist") by
    # asyncpg, which moves to the next host only when a connection fails.
    for each in state.nodes:
        replayed = functools.partial(_has_database, state, each)
        _wait(replayed, f"{each.name} to have the database", _node_log(state, each))


def _node_log(state: HaState, node: NodePorts) -> Path:
    return state.path / node.name / "patroni.log"


def _has_database(state: HaState, node: NodePorts) -> bool:
    try:
        return _psql(state, node, "SELECT 1", DATABASE) == "1"
    except HaError:
        return False


def wait_new_leader(state: HaState, old: NodePorts, timeout_s: float = _START_TIMEOUT_S) -> float:
    """Until a node other than `old` leads; when that was seen (time.monotonic())."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = leader(state)
        if now is not None and now.name != old.name:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise HaError(f"no node took over from {old.name} within {timeout_s:.0f} s")
        time.sleep(0.1)


def kill_leader(state: HaState) -> NodePorts:
    """SIGKILL of the leader's Patroni and its postmaster (a machine lost, as far as they go)."""
    node = leader(state)
    if node is None:
        raise HaError("the cluster has no leader to kill")
    postmaster = _postmaster_pid(state, node)
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pids[node.name], signal.SIGKILL)
    if postmaster is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGKILL)
    return node


def switchover(state: HaState) -> tuple[NodePorts, NodePorts]:
    """A planned switchover (Patroni's REST `POST /switchover`, as `patronictl switchover` sends
    it) from the leader to its synchronous standby, which synchronous mode requires; (old, new)
    once Patroni reports it done."""
    roles = {m.get("role"): m.get("name") for m in members(state)}
    by_name = {n.name: n for n in state.nodes}
    old, new = by_name.get(str(roles.get("leader"))), by_name.get(str(roles.get("sync_standby")))
    if old is None or new is None:
        raise HaError(f"no leader and synchronous standby to switch over between: {members(state)}")
    body = json.dumps({"leader": old.name, "candidate": new.name}).encode()
    request = urllib.request.Request(
        f"http://{HOST}:{old.rest}/switchover",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            reply.read()
    except urllib.error.HTTPError as exc:
        raise HaError(f"switchover refused: {exc.code} {exc.read().decode(errors='replace')}") from None
    except OSError as exc:
        raise HaError(f"switchover: {old.name}'s REST API did not answer: {exc}") from None
    return old, new


def _postmaster_pid(state: HaState, node: NodePorts) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((state.path / node.name / "data" / "postmaster.pid").read_text().splitlines()[0])
    return None


def restart_node(state: HaState, node: NodePorts) -> None:
    """Starts a node's Patroni again (it rejoins as a standby, rewound if it must)."""
    user = _owner()
    config = state.path / node.name / "patroni.yml"
    state.pids[node.name] = _spawn(
        [patroni_command(), str(config)], state.path / node.name / "patroni.log", user, _child_env(user)
    )
    state.save()


def down(root: Path, *, purge: bool = False) -> None:
    """Stops the nodes (each Patroni stops its PostgreSQL), then etcd; `purge` removes the files."""
    try:
        state = HaState.load(root.resolve())
    except HaError:
        if purge:
            shutil.rmtree(root, ignore_errors=True)
        return
    nodes = [name for name in state.pids if name != "etcd"]
    for name in nodes:
        _signal_group(state.pids[name], signal.SIGTERM)
    _until_gone([state.pids[n] for n in nodes], _STOP_TIMEOUT_S)
    for node in state.nodes:  # a postmaster left by a killed Patroni
        pid = _postmaster_pid(state, node)
        if pid is not None and _alive(pid):
            _signal_group(pid, signal.SIGKILL)
    if "etcd" in state.pids:
        _signal_group(state.pids["etcd"], signal.SIGTERM)
        _until_gone([state.pids["etcd"]], _STOP_TIMEOUT_S)
    state.pids = {}
    state.save()
    if purge:
        shutil.rmtree(root, ignore_errors=True)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _until_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            for pid in pids:
                _signal_group(pid, signal.SIGKILL)
            return
        time.sleep(0.1)
