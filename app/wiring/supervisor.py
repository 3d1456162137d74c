"""`serve --processes N`: one supervisor, N `serve` children sharing the gRPC, REST and segment-store
ports (SO_REUSEPORT), each a cluster member of its own; a child that dies is restarted with a backoff.

Invariant: every child of one run listens on the same ports. The supervisor binds them first (with
SO_REUSEPORT, never listening, so no connection ever waits on it) and holds them for the whole run,
so an ephemeral port stays this run's and a restarted child gets it back. The ready file appears
only once every child has written its own. Every child runs the embedded segment store behind the
shared port, as store i of the run's group (`--segment-store-group`): the group's sockets in the
run's private directory carry each store's segment changes to the others (a read parked in one
child wakes on an append through another) and their traffic to store 0, which judges auto-scaling
for all (that directory carries the supervisor's pid, so the next run removes one a killed
supervisor left); data, order and de-duplication are PostgreSQL's, whichever child a connection lands on.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.embedded_pg import EmbeddedPostgres
from app.observability.task_dump import dump_tasks_on_sigusr1
from app.security.signing_key import KEY_ENV
from app.settings import Settings
from app.waiting import bounded, wait_event
from app.wiring.embedded_db import EMBEDDED_DATABASE, cancel_keeper, guard_database, keep_database
from app.wiring.shutdown_watchdog import EXIT_SHUTDOWN_OVERRAN, shutdown_budget_s

log = logging.getLogger("pgcontroller.supervisor")

# A child dying again within STABLE_S of its start doubles the wait before the next start.
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
STABLE_S = 30.0
# A child's start-up includes migrations and joining the cluster; one that takes longer is killed.
CHILD_READY_TIMEOUT_S = 60.0
_POLL_S = 0.05
_PR_SET_PDEATHSIG = 1
# The run's private directory is named after the supervisor's pid, so a later run can tell the
# directory of a supervisor that was killed (and never cleaned up) from a live run's.
PRIVATE_DIR_PREFIX = "pgcontroller-processes-"


@dataclass
class _Child:
    index: int
    args: list[str]
    ready_file: Path
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    quick_deaths: int = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass
class _Ports:
    """The bound, never-listening sockets that reserve the shared ports for the run."""

    grpc: socket.socket
    rest: socket.socket
    store: socket.socket | None
    all: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        for sock in self.all:
            sock.close()


def _reserve(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _reserve_ports(settings: Settings) -> _Ports:
    taken: list[socket.socket] = []
    try:
        grpc = _reserve(settings.grpc_host, settings.grpc_port)
        taken.append(grpc)
        rest = _reserve(settings.rest_host, settings.rest_port)
        taken.append(rest)
        store = None
        if not settings.no_embedded_segment_store:
            store = _reserve(settings.segment_store_host, settings.segment_store_port)
            taken.append(store)
    except OSError:
        for sock in taken:
            sock.close()
        raise
    return _Ports(grpc, rest, store, taken)


def _port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """A child must not outlive a supervisor that was killed (it would hold the ports serving
    alone): on Linux the kernel sends it SIGTERM, the ordered stop, when the supervisor dies."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: nothing may be loaded after the fork

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before the request was in place
            os._exit(1)

    return arm


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        argv: Sequence[str],
        env: dict[str, str],
        ports: _Ports,
        work: Path,
        stop: asyncio.Event,
    ) -> None:
        self._settings = settings
        self._env = env
        self._ports = ports
        self._stop = stop
        self._started = False  # every child was ready once: from then on a death is restarted
        self._stopping = False
        self._fatal: int | None = None
        self._budget_s = shutdown_budget_s(settings.shutdown_drain_s, settings.shutdown_timeout_s)
        self._preexec = die_with_parent(os.getpid())
        base = [sys.executable, "-m", "app.cli", *argv]
        # The stores' sockets: inside the run's own directory, which only our user may enter.
        (work / "stores").mkdir(mode=0o700, exist_ok=True)
        self.children = [
            _Child(i, [*base, *self._overrides(i, work)], work / f"child-{i}.json")
            for i in range(settings.processes)
        ]

    def _overrides(self, index: int, work: Path) -> list[str]:
        """The flags that make child `index` one of the run (later flags win in argparse)."""
        s = self._settings
        args = [
            "--processes", "1",
            "--reuse-port",
            "--instance-id", f"{s.instance_id}-{index}",
            "--grpc-port", str(_port(self._ports.grpc)),
            "--rest-port", str(_port(self._ports.rest)),
            "--ready-file", str(work / f"child-{index}.json"),
        ]  # fmt: skip
        store = self._ports.store
        if store is None:
            return args
        args += ["--segment-store-port", str(_port(store))]
        if s.processes < 2:
            return args
        return [*args, "--segment-store-group", f"{index}:{s.processes}:{work / 'stores'}"]

    async def run(self) -> int:
        """Starts every child (child 0 first: it migrates the schema and joins the cluster alone),
        writes the ready file, keeps the children running until a stop, then stops them."""
        keepers: list[asyncio.Task[None]] = []
        try:
            first, *others = self.children
            if await self._start(first) and all(await asyncio.gather(*(self._start(c) for c in others))):
                self._ready()
                keepers = [
                    asyncio.create_task(self._keep(c), name=f"keep-child-{c.index}") for c in self.children
                ]
                await self._stop.wait()
            if self._fatal is None:
                log.info("shutdown requested: stopping %d controller processes", len(self.children))
            self._stopping = True
            for task in keepers:
                task.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            return await self._stop_all()
        finally:
            await self._kill_all()

    async def _start(self, child: _Child) -> bool:
        """True once the child has written its ready file; False when it exited first, was not
        ready in time (then killed), or a stop came. A failure during the run's start is fatal."""
        child.ready_file.unlink(missing_ok=True)
        child.process = await asyncio.create_subprocess_exec(
            *child.args, env=self._env, preexec_fn=self._preexec
        )
        child.started_at = time.monotonic()
        deadline = child.started_at + CHILD_READY_TIMEOUT_S
        while not child.ready_file.exists():
            if child.process.returncode is not None:
                log.error(
                    "controller process %d exited with %s before it was ready",
                    child.index,
                    child.process.returncode,
                )
                self._fail(child.process.returncode or 1)
                return False
            if self._stop.is_set():
                return False
            if time.monotonic() > deadline:
                log.error(
                    "controller process %d was not ready in %.0f s; killing it",
                    child.index,
                    CHILD_READY_TIMEOUT_S,
                )
                child.process.kill()
                await child.process.wait()
                self._fail(1)
                return False
            await asyncio.sleep(_POLL_S)
        return True

    def abort(self, code: int) -> None:
        """Stops the run, which then exits with `code` (something it cannot do without has gone)."""
        if self._fatal is None:
            self._fatal = code
        self._stop.set()

    def _fail(self, code: int) -> None:
        # Only at the run's start: a child that cannot start there will not start on a retry either
        # (bad settings, a cluster refusing them), so the whole run stops with its exit code.
        if not self._stopping and not self._started:
            self._fatal = code if code > 0 else 1
            self._stop.set()

    def _ready(self) -> None:
        self._started = True
        pids = [c.process.pid for c in self.children if c.process is not None]
        s = self._settings
        store = "" if self._ports.store is None else f", segment store :{_port(self._ports.store)}"
        log.info(
            "pgcontroller %s ready: %d processes (pids %s) on gRPC %s:%d, REST %s:%d%s",
            s.instance_id, len(pids), ", ".join(map(str, pids)),
            s.grpc_host, _port(self._ports.grpc), s.rest_host, _port(self._ports.rest), store,
        )  # fmt: skip
        self._write_ready_file()

    def _write_ready_file(self) -> None:
        path = self._settings.ready_file
        if path is None:
            return
        ready: dict[str, object] = {
            "grpc_port": _port(self._ports.grpc),
            "rest_port": _port(self._ports.rest),
            "pid": os.getpid(),
            "processes": [c.process.pid if c.running and c.process else None for c in self.children],
        }
        if self._ports.store is not None:
            ready["segment_store_port"] = _port(self._ports.store)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(json.dumps(ready) + "\n")
        os.replace(tmp, path)

    async def _keep(self, child: _Child) -> None:
        """Restarts the child each time it dies, after a backoff that grows while it keeps dying
        soon after its start; the ready file names the new pid once the child is ready again."""
        while True:
            assert child.process is not None
            code = await child.process.wait()
            up_s = time.monotonic() - child.started_at
            child.quick_deaths = child.quick_deaths + 1 if up_s < STABLE_S else 0
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, child.quick_deaths - 1))
            log.warning(
                "controller process %d (pid %d) exited with %s after %.1f s; restarting it in %.1f s",
                child.index, child.process.pid, code, up_s, delay,
            )  # fmt: skip
            await wait_event(self._stop, delay)
            if self._stop.is_set():
                return
            if await self._start(child):
                log.info("controller process %d restarted (pid %d)", child.index, child.process.pid)
                self._write_ready_file()

    async def _stop_all(self) -> int:
        """Children 1..N-1 first, then child 0, whose segment store (the group's last) deregisters
        the shared address; each group gets the shutdown budget. 0 when every child stopped cleanly,
        else the first failing child's code (EXIT_SHUTDOWN_OVERRAN for one killed past the budget)."""
        self._stopping = True
        codes: list[int] = []
        for group in (self.children[1:], self.children[:1]):
            codes += await asyncio.gather(*(self._stop_child(c) for c in group))
        if self._fatal is not None:
            return self._fatal
        return next((code for code in codes if code != 0), 0)

    async def _stop_child(self, child: _Child) -> int:
        process = child.process
        if process is None or process.returncode is not None:
            return 0  # already gone (waiting to be restarted): nothing to stop
        process.send_signal(signal.SIGTERM)
        try:
            # The child's own watchdog ends it at the budget; the margin lets it log why first.
            code = await bounded(process.wait(), self._budget_s + 2.0)
        except TimeoutError:
            log.error("controller process %d (pid %d) did not stop; killing it", child.index, process.pid)
            process.kill()
            await process.wait()
            return EXIT_SHUTDOWN_OVERRAN
        # Killed by our own SIGTERM: a child still starting has no handler yet, and that is a stop.
        return 0 if code == -signal.SIGTERM else code if code >= 0 else 1

    async def _kill_all(self) -> None:
        """The last resort on the way out (a failed start, an error): no child outlives us."""
        for child in self.children:
            if child.process is not None and child.process.returncode is None:
                child.process.kill()
                await child.process.wait()


async def _database_env(
    settings: Settings, stack: contextlib.AsyncExitStack
) -> tuple[dict[str, str], EmbeddedPostgres | None]:
    """What the children need beyond argv, in their environment (never argv, which `ps` shows):
    the embedded PostgreSQL's URL, started here once and stopped after every child has, and the
    signing key made for this run, so each child's tokens are checked by the store of another.
    Also the embedded server when this run owns it, to keep it running."""
    env = dict(os.environ)
    owned = None
    if settings.db_url is None:
        embedded = EmbeddedPostgres(settings.data_dir)
        if await asyncio.to_thread(embedded.start, owned=True):
            stack.push_async_callback(asyncio.to_thread, embedded.stop)
            guard_database(embedded, stack)
            owned = embedded
        env["PGCONTROLLER_DB_URL"] = embedded.url()
    key = settings.token_signing_key
    if key is not None and settings.auth_token_signing_key_file is None:
        env[KEY_ENV] = key.decode()
    return env, owned


def _keep_database(
    embedded: EmbeddedPostgres, attempts: int, supervisor: Supervisor, stack: contextlib.AsyncExitStack
) -> None:
    """The children hold the server's URL but cannot restart it: the supervisor, which started it,
    keeps it running; one it cannot bring back ends the run (exit 1)."""
    keeping = keep_database(embedded, embedded.port(), attempts, log)
    keeper = asyncio.create_task(keeping, name=EMBEDDED_DATABASE)

    def lost(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("stopping: %s", task.exception())
            supervisor.abort(1)

    keeper.add_done_callback(lost)
    stack.push_async_callback(cancel_keeper, keeper)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    return True


def sweep_private_dirs(parent: Path) -> list[Path]:
    """Removes the private directories that killed supervisors left in `parent` (their pid is
    gone; only this user's), and returns them. A pid taken again by another process keeps its
    directory until that process is gone too."""
    removed = []
    for path in parent.glob(f"{PRIVATE_DIR_PREFIX}*-*"):
        pid_text = path.name[len(PRIVATE_DIR_PREFIX) :].split("-", 1)[0]
        try:
            owner = path.stat().st_uid
        except OSError:
            continue
        if not pid_text.isdigit() or owner != os.getuid() or _alive(int(pid_text)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def private_dir() -> Path:
    parent = Path(tempfile.gettempdir())
    for stale in sweep_private_dirs(parent):
        log.info("removed %s, left by a supervisor that was killed", stale)
    return Path(tempfile.mkdtemp(prefix=f"{PRIVATE_DIR_PREFIX}{os.getpid()}-", dir=parent))


async def supervise(settings: Settings, argv: Sequence[str]) -> int:
    """Runs `settings.processes` `serve` children of `argv` (this process's own arguments) until
    SIGTERM/SIGINT; returns 0 after a clean stop, or the exit code of a child that could not start."""
    async with contextlib.AsyncExitStack() as stack:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            stack.callback(loop.remove_signal_handler, sig)
        dump_tasks_on_sigusr1()
        env, embedded = await _database_env(settings, stack)
        ports = _reserve_ports(settings)
        stack.callback(ports.close)  # after the children have stopped: the ports are ours until then
        work = private_dir()
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        supervisor = Supervisor(settings, argv, env, ports, work, stop)
        if embedded is not None:
            _keep_database(embedded, settings.embedded_db_restart_attempts, supervisor, stack)
        return await supervisor.run()
    return 0  # not reached (the stack swallows nothing); mypy cannot tell
