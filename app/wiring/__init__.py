"""Wiring by capability: one module per capability builds its part of the controller from
`Settings` and the shared `Resources` and returns what it adds (gRPC handlers, REST routes,
background loops); `wire` composes them in layer order. Only the composition root (app.main)
and the test harness import this package.
"""

from app.wiring.controller import Controller, grpc_extensions, rest_extensions, wire
from app.wiring.health import register_contributors
from app.wiring.loops import BackgroundLoops
from app.wiring.resources import Contribution, Resources, open_resources
from app.wiring.segment_store import start_embedded_segment_store, with_embedded_store
from app.wiring.servers import Servers, start_servers

__all__ = [
    "BackgroundLoops",
    "Contribution",
    "Controller",
    "Resources",
    "Servers",
    "grpc_extensions",
    "open_resources",
    "register_contributors",
    "rest_extensions",
    "start_embedded_segment_store",
    "start_servers",
    "wire",
    "with_embedded_store",
]
