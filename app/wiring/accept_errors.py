"""Out-of-descriptor failures of accept() on every listening port of the process, logged once per
interval with a count.

asyncio reports each failed accept() (EMFILE, ENFILE, ENOBUFS, ENOMEM) to the loop's exception
handler with a traceback, and retries up to the backlog's worth in the same loop turn: with the
descriptors exhausted that was up to 10,000 tracebacks a second, tens of MB of log, on gRPC, REST
and the store port alike. The handler installed here counts exactly those and hands every other
report to the handler it replaced (asyncio's default one when there was none)."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from typing import Any

from app.observability.throttled_log import DEFAULT_INTERVAL_S, ThrottledWarning

# asyncio's own wording (BaseSelectorEventLoop._accept_connection); the only way to tell them.
ACCEPT_OUT_OF_RESOURCE = "socket.accept() out of system resource"

log = logging.getLogger("pgcontroller.accept")


def quiet_accept_errors(
    loop: asyncio.AbstractEventLoop, interval_s: float = DEFAULT_INTERVAL_S
) -> Callable[[], None]:
    """Installs the handler on `loop`; the callable returned puts the previous handler back."""
    previous = loop.get_exception_handler()
    report = ThrottledWarning(log, "accept() failed, the connection waits in the backlog", interval_s)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_OUT_OF_RESOURCE:
            if previous is None:
                loop.default_exception_handler(context)
            else:
                previous(loop, context)
            return
        report.record(_describe(context))

    loop.set_exception_handler(handle)

    def uninstall() -> None:
        report.close()
        loop.set_exception_handler(previous)

    return uninstall


def _describe(context: dict[str, Any]) -> str:
    exc = context.get("exception")
    reason = (
        errno.errorcode.get(exc.errno, str(exc.errno))
        if isinstance(exc, OSError) and exc.errno
        else repr(exc)
    )
    sock = context.get("socket")
    try:
        where = f"port {sock.getsockname()[1]}" if sock is not None else "a listening socket"
    except OSError:
        where = "a listening socket"
    return f"{reason} on {where}"
