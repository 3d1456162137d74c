"""Pravega 0.13 standalone (`io.pravega.local.LocalPravegaEmulator`) on free ports: the oracle the
conformance tests compare `serve` with. It runs from the class path that `oracle/pom.xml`
resolves, in a JVM of its own that the kernel stops when the test process dies."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.testing.ports import free_port
from app.wiring.supervisor import die_with_parent
from tests.conformance.maven import ORACLE, classpath

READY_LINE = "Pravega Sandbox is running locally now"
# Five seconds on an idle machine; a minute and more beside a full parallel suite on two cores.
READY_TIMEOUT_S = 240.0


@dataclass
class Standalone:
    process: subprocess.Popen[bytes]
    controller_port: int
    rest_port: int
    segment_store_port: int
    log_path: Path
    scheme: str = "tcp"

    @property
    def controller_uri(self) -> str:
        return f"{self.scheme}://localhost:{self.controller_port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        # A throwaway: its data lives in the test's directory, and its orderly shutdown waits on
        # retries for half a minute.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


# Starts with fresh ports after a port was taken between free_port() and the JVM's bind (any
# process's outgoing connection may get it as its ephemeral port while the suite runs in parallel).
START_ATTEMPTS = 3
_PORT_TAKEN = "java.net.BindException: Address already in use"


class PortTaken(RuntimeError):
    """The standalone exited at start because one of its ports was taken meanwhile."""


def start_standalone(
    work_dir: Path, properties: Mapping[str, str] | None = None, scheme: str = "tcp"
) -> Standalone:
    """A ready standalone whose data lives under `work_dir`; `properties` add to or override its
    `singlenode.*` configuration (authentication, TLS)."""
    return on_free_ports(lambda _attempt: _start_once(work_dir, properties, scheme))


def on_free_ports(start: Callable[[int], Standalone]) -> Standalone:
    """`start(attempt)` (1, 2, ...) again while the JVM it started exited because one of the
    ports it chose was taken between choosing and binding it, up to START_ATTEMPTS times."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return start(attempt)
        except PortTaken:
            if attempt == START_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _start_once(work_dir: Path, properties: Mapping[str, str] | None, scheme: str) -> Standalone:
    work_dir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("zkPort", "controllerPort", "restServerPort", "segmentstorePort")}
    settings = {f"singlenode.{name}": str(port) for name, port in ports.items()}
    # No REST: the clients never use it, and its segment store half binds a fixed port (6061), so
    # two standalones could not run at once.
    settings["singlenode.enableRestServer"] = "false"
    settings["singlenode.admin.gateway.enable"] = "false"
    settings.update(properties or {})
    config = work_dir / "standalone.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    log_path = work_dir / "standalone.log"
    command = [
        "java",
        "-Xmx3g",
        "-XX:+UseSerialGC",
        f"-Djava.io.tmpdir={work_dir}",
        f"-Dsinglenode.configurationFile={config}",
        f"-Dlogback.configurationFile={ORACLE / 'logback.xml'}",
        "-cp",
        classpath(ORACLE, package=True),
        "io.pravega.local.LocalPravegaEmulator",
    ]
    process = spawn(command, work_dir, log_path)
    standalone = Standalone(
        process, ports["controllerPort"], ports["restServerPort"], ports["segmentstorePort"], log_path, scheme
    )
    await_ready(standalone, "Pravega standalone", READY_TIMEOUT_S)
    return standalone


def spawn(command: list[str], work_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """`command` in `work_dir`, its output to `log_path`; the kernel stops it when this process dies."""
    with open(log_path, "wb") as log_file:
        return subprocess.Popen(
            command,
            cwd=work_dir,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(os.getpid()),
        )


def await_ready(server: Standalone, what: str, timeout_s: float) -> None:
    """Returns once `server` has logged the ready line and its controller's port accepts (the
    sandbox says it is running a moment before it does); `PortTaken` when it exited because one
    of its ports was taken, another error when it exited otherwise or was not ready in time
    (then it is stopped)."""
    deadline = time.monotonic() + timeout_s
    while READY_LINE not in server.log() or not accepts(server.controller_port):
        if server.process.poll() is not None:
            log = server.log()
            failed = PortTaken if _PORT_TAKEN in log else RuntimeError
            raise failed(f"{what} exited with {server.process.returncode}:\n{log[-8000:]}")
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{what} was not ready in {timeout_s:.0f} s:\n{server.log()[-8000:]}")
        time.sleep(0.1)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
