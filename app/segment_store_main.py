"""`pgcontroller segment-store`: a segment store without the controller (app/process.py composes
and runs it).

It serves Pravega's wire protocol over the cluster's PostgreSQL, registers its address, heartbeats,
and serves only the containers of the cluster's container map that name it, until SIGTERM/SIGINT
(then it deregisters, so its containers move at once). Any number of them share one database. Its
metrics and health probes are on an HTTP listener of its own (app/wiring/store_listener.py).
"""

from __future__ import annotations

import logging

from app.process import ProcessRefused, Role, open_process
from app.settings import Settings

log = logging.getLogger("pgcontroller.segment-store")


async def serve_segment_store(settings: Settings) -> int:
    """Serves until SIGTERM/SIGINT and returns 0; 1 when it cannot start or a task died."""
    try:
        async with open_process(settings, Role.SEGMENT_STORE) as runtime:
            return await runtime.until_stopped()
    except ProcessRefused as refused:
        log.error("%s", refused)
        return refused.exit_code
