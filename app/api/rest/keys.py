"""Typed application keys through which REST handlers reach the services.

Kept apart from the factory so handler modules can import them without a cycle.
"""

from aiohttp import web

from app.services.health import HealthService
from app.services.lifecycle import StreamLifecycle
from app.services.scopes import ScopeService
from app.services.streams import StreamService
from app.services.transactions import TransactionService

SCOPES = web.AppKey("scopes", ScopeService)
STREAMS = web.AppKey("streams", StreamService)
HEALTH = web.AppKey("health", HealthService)
LIFECYCLE = web.AppKey("lifecycle", StreamLifecycle)
TRANSACTIONS = web.AppKey("transactions", TransactionService)
OPENAPI = web.AppKey("openapi", bytes)
