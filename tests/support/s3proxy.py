"""A real S3 server for the long-term tier's tests and bench: S3Proxy 2.6.0 (Maven Central) with
jclouds' filesystem provider, on a free loopback port, its objects under a directory of its own.
A bucket is a directory there, so a test makes one with `bucket()`; `stop()`/`start()` make an
outage on the same port and data; `stuttering()` a server that keeps stopping to answer for a
while (a loaded or pausing S3)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.testing.ports import free_port
from tests.conformance.maven import classpath

PROJECT = Path(__file__).parent / "s3proxy"
IDENTITY = "pgcontroller-tests"
CREDENTIAL = "pgcontroller-tests-secret"
START_TIMEOUT_S = 60.0


@dataclass
class S3Proxy:
    root: Path
    port: int
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def objects(self) -> Path:
        return self.root / "objects"

    def bucket(self, name: str) -> str:
        (self.objects / name).mkdir(parents=True, exist_ok=True)
        return name

    def count(self, bucket: str) -> int:
        """Objects in `bucket` (jclouds keeps each as a file under the bucket's directory). The
        tier may be deleting objects meanwhile, and jclouds removes a directory it empties: one
        that vanishes mid-walk is skipped (os.walk ignores it), where rglob raised."""
        return sum(len(files) for _, _, files in os.walk(self.objects / bucket))

    def start(self) -> None:
        self.objects.mkdir(parents=True, exist_ok=True)
        properties = self.root / "s3proxy.properties"
        properties.write_text(
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}\n"
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={IDENTITY}\n"
            f"s3proxy.credential={CREDENTIAL}\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.objects}\n"
        )
        log = open(self.root / "s3proxy.log", "ab")  # noqa: SIM115 (the child keeps it)
        self._process = subprocess.Popen(
            [
                "java",
                f"-Dlogback.configurationFile={PROJECT / 'logback.xml'}",
                "-Xmx256m",
                "-cp",
                classpath(PROJECT, package=False),
                "org.gaul.s3proxy.Main",
                "--properties",
                str(properties),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"S3Proxy exited {self._process.returncode}: {self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"S3Proxy did not listen within {START_TIMEOUT_S} s: {self._log_tail()}")

    def stop(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    @asynccontextmanager
    async def stuttering(self, frozen_s: float, running_s: float) -> AsyncIterator[None]:
        """Inside: the server frozen (SIGSTOP) for `frozen_s`, then running for `running_s`, over
        and over; it runs again on the way out, whatever happened inside."""
        assert self._process is not None, "S3Proxy is not running"
        group = self._process.pid  # started in a session of its own: its group's leader

        async def stutter() -> None:
            while True:
                os.killpg(group, signal.SIGSTOP)
                try:
                    await asyncio.sleep(frozen_s)
                finally:
                    os.killpg(group, signal.SIGCONT)
                await asyncio.sleep(running_s)

        task = asyncio.create_task(stutter())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            os.killpg(group, signal.SIGCONT)

    def _log_tail(self) -> str:
        path = self.root / "s3proxy.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


@contextmanager
def running_s3proxy(root: Path) -> Iterator[S3Proxy]:
    proxy = S3Proxy(root, free_port())
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
