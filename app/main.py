"""`serve`: a controller process (app/process.py composes and runs it) serving gRPC and REST until
SIGTERM/SIGINT; with `--processes N`, `supervise` runs N of them under one supervisor."""

from __future__ import annotations

import logging

from app.process import ProcessRefused, Role, open_process
from app.settings import Settings
from app.wiring import grpc_extensions, rest_extensions
from app.wiring.supervisor import supervise

__all__ = ["grpc_extensions", "rest_extensions", "serve", "supervise"]

log = logging.getLogger("pgcontroller")


async def serve(settings: Settings) -> int:
    """Serves until SIGTERM/SIGINT and returns 0; 1 when a background task died, 2 when the
    cluster in the database refuses these settings (its bucket or container counts differ)."""
    try:
        async with open_process(settings, Role.CONTROLLER) as runtime:
            return await runtime.until_stopped()
    except ProcessRefused as refused:
        log.error("%s", refused)
        return refused.exit_code
