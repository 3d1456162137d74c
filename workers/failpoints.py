"""Named failure points for crash tests; inert unless PGCONTROLLER_FAILPOINTS names them.

`PGCONTROLLER_FAILPOINTS=scale.after_new_epoch` parks the workflow there (a test then kills the
process with SIGKILL at a known step instead of by luck); `name=raise` makes the point raise,
e.g. to prove that a background loop that dies takes the process down; `name=pause_when:PATH`
passes until the file PATH exists and parks from then on (a test arms it mid-run); if the file
holds a regular expression, only hits whose detail matches it park (write such a file whole and
rename it into place: a hit that reads it empty parks).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger("pgcontroller.failpoints")


def _parse(text: str) -> dict[str, str]:
    points: dict[str, str] = {}
    for part in text.split(","):
        name, _, action = part.strip().partition("=")
        if name:
            points[name] = action or "pause"
    return points


_ENABLED = _parse(os.environ.get("PGCONTROLLER_FAILPOINTS", ""))
_PAUSE_WHEN = "pause_when:"


class FailpointError(RuntimeError):
    """Raised by a failpoint set to `raise`."""


def _armed(action: str, detail: str) -> bool:
    """Whether a hit parks: always, or (pause_when) once the file exists and, if it holds a
    pattern, the hit's detail matches it (a test waits for a hit of the kind it needs)."""
    if not action.startswith(_PAUSE_WHEN):
        return True
    # A read per hit, and only at a point a test configured with pause_when.
    try:
        pattern = Path(action.removeprefix(_PAUSE_WHEN)).read_text().strip()
    except FileNotFoundError:
        return False
    return not pattern or re.search(pattern, detail) is not None


async def failpoint(name: str, detail: str = "") -> None:
    action = _ENABLED.get(name)
    if action is None:
        return
    if action == "raise":
        raise FailpointError(f"failpoint {name} raised")
    if not _armed(action, detail):
        return
    shown = f" ({detail})" if detail else ""
    log.warning("failpoint %s reached%s: parking this workflow until the process dies", name, shown)
    await asyncio.Event().wait()


def failpoint_hook(name: str) -> Callable[[str], Awaitable[None]] | None:
    """The point `name` as a callable a composition injects into a hot path (given a detail for
    the log line), or None when the process started without it: the hot path's None check is then
    all it costs. Read once, at composition, so a point on a hot path is named by
    PGCONTROLLER_FAILPOINTS only."""
    if name not in _ENABLED:
        return None
    return functools.partial(failpoint, name)
