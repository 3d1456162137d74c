"""Free loopback ports for the servers the tests and benches start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released: another process may take it
    before the caller does, which the callers' starts report as a bind error)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
