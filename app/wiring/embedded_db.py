"""Keeps the embedded PostgreSQL that a process started running: a postmaster that dies (killed, out
of memory) is started again on the same port, with a backoff, and the crash recovery it ran is logged.

Invariant: only the process that owns the server (EmbeddedPostgres.start answered True: `serve`, or
the supervisor of `serve --processes N`) keeps it, and only while it runs: the keeper is cancelled
before the server is stopped on the way out. A server that cannot be brought back in the allowed
attempts ends the keeper with EmbeddedDatabaseLost, which ends the process (exit 1) rather than leave
it serving nothing; its health contributor turns FAILED first, so liveness answers false. A start that
fails for want of disk space (the WAL could not grow: PostgreSQL PANICs, and cannot start while the
disk stays full) uses up no attempt: it is tried again until an operator frees space, readiness false.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from contextlib import AsyncExitStack

from app.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError, PostgresBinariesNotFound
from app.services.health import HealthService, HealthStatus
from app.wiring.loops import BackgroundLoops

EMBEDDED_DATABASE = "embedded-database"
# How often the postmaster's pid is checked (a read of its pid file and of /proc: no connection).
CHECK_INTERVAL_S = 0.2
# A pid file caught while the postmaster rewrites it must not pass for a dead server: a death is
# confirmed by a second look this much later.
CONFIRM_AFTER_S = 0.05
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 8.0
# PostgreSQL's own lines about the restart and its crash recovery, repeated in our log.
_RECOVERY_LINES = (
    "not properly shut down",
    "interrupted",
    "automatic recovery",
    "redo ",
    "checkpoint complete",
    "ready to accept connections",
    "FATAL",
    "PANIC",
)
# Our own clients' reconnects refused while it starts: one line each, nothing about the recovery.
_CLIENT_REFUSALS = ("is starting up", "not yet accepting connections")
# strerror(ENOSPC), in PostgreSQL's log and in pg_ctl's output.
NO_SPACE = "No space left on device"
_START_FAILURES = (EmbeddedPostgresError, PostgresBinariesNotFound, OSError, subprocess.SubprocessError)

# The keeper's reports: the status of the embedded database and the details that explain it.
Report = Callable[[HealthStatus, dict[str, str]], None]


class EmbeddedDatabaseLost(RuntimeError):
    """The embedded PostgreSQL died and could not be started again."""


async def keep_database(
    embedded: EmbeddedPostgres, port: int, attempts: int, logger: logging.Logger, report: Report | None = None
) -> None:
    """Runs until cancelled; raises EmbeddedDatabaseLost once `attempts` restarts in a row failed."""
    if report is not None:
        report(HealthStatus.UP, {"port": str(port)})
    while True:
        await asyncio.sleep(CHECK_INTERVAL_S)
        if await _alive(embedded):
            continue
        await _bring_back(embedded, port, attempts, logger, report)


async def _alive(embedded: EmbeddedPostgres) -> bool:
    if await asyncio.to_thread(embedded.server_pid) is not None:
        return True
    await asyncio.sleep(CONFIRM_AFTER_S)
    return await asyncio.to_thread(embedded.server_pid) is not None


async def _bring_back(
    embedded: EmbeddedPostgres, port: int, attempts: int, logger: logging.Logger, report: Report | None
) -> None:
    died_at = time.monotonic()
    logger.error("the embedded PostgreSQL (port %d) has died; restarting it", port)
    if report is not None:
        # Down, not failed: readiness is false while it recovers, liveness stays true.
        report(HealthStatus.DOWN, {"port": str(port), "error": "restarting"})
    delay_s = BACKOFF_FIRST_S
    failure = ""
    attempt = 0
    while attempt < attempts:
        log_offset = _size(embedded)
        began = time.monotonic()
        try:
            await asyncio.to_thread(embedded.start, owned=True, port=port)
        except _START_FAILURES as exc:
            failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if _out_of_space(embedded, log_offset, exc):
                # Not an attempt used up: nothing is wrong with the server, and it starts by itself
                # once an operator frees space (ending the process would not free any).
                logger.error(
                    "the embedded PostgreSQL cannot start: its disk is full (%s); trying again every "
                    "%.0f s until space is freed",
                    embedded.pgdata,
                    BACKOFF_MAX_S,
                )
                if report is not None:
                    report(HealthStatus.DOWN, {"port": str(port), "error": "out of disk space"})
                await asyncio.sleep(BACKOFF_MAX_S)
                continue
            attempt += 1
            logger.error("restart %d of %d of the embedded PostgreSQL failed: %s", attempt, attempts, failure)
            if attempt < attempts:
                await asyncio.sleep(delay_s)
                delay_s = min(BACKOFF_MAX_S, delay_s * 2)
            continue
        attempt += 1
        for line in _recovery_lines(embedded, log_offset):
            logger.info("embedded PostgreSQL: %s", line)
        logger.warning(
            "the embedded PostgreSQL is back (pid %s, port %d): restart %d took %.2f s (crash recovery "
            "included), %.2f s after it died",
            embedded.server_pid(),
            port,
            attempt,
            time.monotonic() - began,
            time.monotonic() - died_at,
        )
        if report is not None:
            report(HealthStatus.UP, {"port": str(port)})
        return
    if report is not None:
        report(HealthStatus.FAILED, {"port": str(port), "error": "could not be restarted"})
    raise EmbeddedDatabaseLost(
        f"the embedded PostgreSQL could not be restarted in {attempts} attempts ({failure}); "
        f"see {embedded.log_path}"
    )


def _out_of_space(embedded: EmbeddedPostgres, log_offset: int, exc: BaseException) -> bool:
    """Whether a start failed for want of disk space (PostgreSQL says so in its log: a WAL segment
    or a checkpoint it could not write)."""
    if NO_SPACE in str(exc):
        return True
    return any(NO_SPACE in line for line in _log_lines(embedded, log_offset))


def _size(embedded: EmbeddedPostgres) -> int:
    try:
        return embedded.log_path.stat().st_size
    except OSError:
        return 0


def _log_lines(embedded: EmbeddedPostgres, offset: int) -> list[str]:
    try:
        with embedded.log_path.open("rb") as log_file:
            log_file.seek(offset)
            text = log_file.read(1 << 20).decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()


def _recovery_lines(embedded: EmbeddedPostgres, offset: int) -> list[str]:
    return [
        line
        for line in _log_lines(embedded, offset)
        if any(marker in line for marker in _RECOVERY_LINES)
        and not any(refusal in line for refusal in _CLIENT_REFUSALS)
    ]


def keep_embedded_database(
    embedded: EmbeddedPostgres,
    attempts: int,
    health: HealthService,
    loops: BackgroundLoops,
    stack: AsyncExitStack,
    logger: logging.Logger,
) -> None:
    """Starts the keeper of the server this process started, as one of its background tasks (a keeper
    that gives up ends the process), and pushes its cancel: on the way out it stops before the server."""
    # The port every client of this run holds in its URL, so a restart must listen on it again.
    port = embedded.port()

    def report(status: HealthStatus, details: dict[str, str]) -> None:
        health.set(EMBEDDED_DATABASE, status, **details)

    task = loops.start(EMBEDDED_DATABASE, lambda: keep_database(embedded, port, attempts, logger, report))
    stack.push_async_callback(cancel_keeper, task)


async def cancel_keeper(task: asyncio.Task[None]) -> None:
    """Stops the keeper. A restart still running in its thread holds the data dir's lock, so the
    server's stop that follows waits for it rather than race it."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def guard_database(embedded: EmbeddedPostgres, stack: AsyncExitStack) -> None:
    """Starts the guard that stops the server if this process ends without stopping it (SIGKILL,
    the OOM killer), and pushes its dismissal: push it after the server's stop, so on the way out
    the guard goes first and the stop is this process's own."""
    guard = embedded.guard()

    def dismiss() -> None:
        guard.kill()
        guard.wait()
        if guard.stdin is not None:
            guard.stdin.close()

    stack.callback(dismiss)
