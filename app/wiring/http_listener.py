"""An aiohttp application listening on a host and port: over TLS when the settings ask for it,
the runner cleaned up when the port cannot be bound, the bound port answered (0 asks the OS).
The REST port of `serve` and the metrics port of `segment-store` both start this way."""

from __future__ import annotations

from aiohttp import web

from app.security.tls import ALPN_REST, server_context
from app.settings import Settings


async def listen_http(
    app: web.Application, settings: Settings, host: str, port: int
) -> tuple[web.AppRunner, int]:
    """The started runner and its bound port; OSError (nothing left open) when the port is taken."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(
            runner,
            host,
            port,
            reuse_address=True,
            # None, not False: aiohttp then leaves the option alone, as it always did.
            reuse_port=settings.reuse_port or None,
            ssl_context=server_context(settings, ALPN_REST),
        )
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1]) if runner.addresses else port
