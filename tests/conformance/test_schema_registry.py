"""Pravega's Schema Registry 0.5.0 against `serve`: the registry keeps its groups, schemas and
encodings in table segments of serve's segment store (it creates and reads them with the wire
protocol's table commands, its scope `_schemaregistry` through the controller). An application
registers an Avro group and its schemas and writes events through the registry's serializers
(SchemaRegistryScenario, phase write); after the registry AND serve restart (serve on the same
ports and database) another finds all of it and reads every event back (phase read)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.testing.ports import free_port
from app.testing.served import ServedProcess, start_served
from app.wiring.supervisor import die_with_parent
from tests.conformance.maven import CONFORMANCE, SUITE, classpath
from tests.support.dataplane import restart_on_same_ports

REGISTRY = CONFORMANCE / "registry"
SCOPE = "registry-scenario"
# A JVM starting, and the registry creating its scope, take seconds on an idle machine and far
# longer beside a full parallel suite on two cores.
READY_TIMEOUT_S = 240.0
PHASE_TIMEOUT_S = 300.0
# Both JVMs are short-lived and small: the C1 compiler alone starts them faster on two cores.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
LOG_TAIL = 6000

# The first run on a machine downloads the registry's jars (about 100 MiB) and the suite's.
pytestmark = pytest.mark.timeout(1800)


@dataclass
class Registry:
    """One Schema Registry server (`io.pravega.schemaregistry.service.Main`), its log in a file."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def ready(self) -> None:
        """Returns once its REST port answers, which it opens only after its store has created
        its scope through the controller; a registry that exits first or is late fails the test."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not await answers_ping(self.port):
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the registry exited with {self.process.returncode}:\n{self.log()[-LOG_TAIL:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the registry did not answer in {READY_TIMEOUT_S:.0f} s:\n{self.log()[-LOG_TAIL:]}"
                )
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        # It keeps nothing of its own (its data is in serve's table segments), and its orderly
        # shutdown dumps every thread's stack and waits on Grizzly: a kill is what a crash does.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


async def answers_ping(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        status = await reader.readline()
        return status.split()[1:2] == [b"200"]
    except (OSError, IndexError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def launch_registry(registry_classpath: str, controller_uri: str, log_path: Path) -> Registry:
    """A registry storing in the Pravega behind `controller_uri` (which need not answer yet: the
    registry retries for a minute); `Registry.ready` waits for it."""
    port = free_port()
    command = [
        "java",
        *JVM_OPTIONS,
        f"-Dlogback.configurationFile={REGISTRY / 'logback.xml'}",
        "-DschemaRegistry.store.type.name=Pravega",
        f"-DschemaRegistry.store.pravega.controller.connect.uri={controller_uri}",
        "-DschemaRegistry.service.rest.published.host.nameOrIp=127.0.0.1",
        f"-DschemaRegistry.service.rest.listener.port={port}",
        # Its default, 50 threads, is for a production service.
        "-DschemaRegistry.threadPool.size=8",
        "-cp",
        registry_classpath,
        "io.pravega.schemaregistry.service.Main",
    ]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            command,
            cwd=log_path.parent,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(os.getpid()),
        )
    return Registry(process, port, log_path)


async def run_phase(suite_classpath: str, phase: str, registry: Registry, served: ServedProcess) -> str:
    """The scenario's output; a phase that fails fails the test with it and the servers' logs."""
    command = [
        "java",
        *JVM_OPTIONS,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        suite_classpath,
        "io.pgcontroller.conformance.SchemaRegistryScenario",
        *("--registry", registry.uri, "--controller", served.grpc_uri),
        *("--scope", SCOPE, "--phase", phase),
    ]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=die_with_parent(os.getpid()),
    )
    try:
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout=PHASE_TIMEOUT_S)
    except TimeoutError:
        process.send_signal(signal.SIGKILL)
        stdout, _ = await process.communicate()
        stdout += f"\n(killed after {PHASE_TIMEOUT_S:.0f} s)".encode()
    output = stdout.decode(errors="replace")
    assert process.returncode == 0, (
        f"phase {phase} failed ({process.returncode}):\n{output[-LOG_TAIL:]}\n"
        f"--- the registry's log ends:\n{registry.log()[-LOG_TAIL:]}\n"
        f"--- serve's log ends:\n{served.log()[-LOG_TAIL:]}"
    )
    return output


async def test_schema_registry_keeps_its_groups_and_events_across_restarts(
    db_url: str, tmp_path: Path
) -> None:
    # The suite's jar builds (when its sources changed) while serve and the registry start.
    suite_build = asyncio.create_task(asyncio.to_thread(classpath, SUITE, package=True))
    registry: Registry | None = None
    served: ServedProcess | None = None
    try:
        registry_classpath = await asyncio.to_thread(classpath, REGISTRY, package=False)
        serve_dir = tmp_path / "serve"
        serve_dir.mkdir()
        served = await start_served(serve_dir, "--db-url", db_url)
        registry = launch_registry(registry_classpath, served.grpc_uri, tmp_path / "registry-1.log")
        await registry.ready()
        suite = await suite_build
        await run_phase(suite, "write", registry, served)

        registry.stop()
        code = await served.stop()
        assert code == 0, served.log()[-LOG_TAIL:]
        served = await restart_on_same_ports(serve_dir, served, "--db-url", db_url)
        # Not while serve starts: the registry's retries back off to 10 s between attempts.
        registry = launch_registry(registry_classpath, served.grpc_uri, tmp_path / "registry-2.log")
        await registry.ready()
        await run_phase(suite, "read", registry, served)
    finally:
        if registry is not None:
            registry.stop()
        if served is not None:
            code = await served.stop()
        # Its failure, if the test failed before awaiting it, is not the one to report.
        with contextlib.suppress(Exception):
            await suite_build
    assert code == 0, served.log()[-LOG_TAIL:]
