"""The operators' REST application (Pravega's /v1 paths): the factory, its route table and the
one middleware that turns every failure, expected or not, into a JSON `Error` body; a domain
error answers the HTTP status of its row in the error table shared with gRPC (app/api/errors.py)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from app.api.errors import UNMAPPED, message_for, row_for
from app.api.rest import compat
from app.api.rest import health as health_routes
from app.api.rest import scopes as scope_routes
from app.api.rest import streams as stream_routes
from app.api.rest import transactions as txn_routes
from app.api.rest.access_log import access_log
from app.api.rest.http import error_response, text_inputs
from app.api.rest.keys import HEALTH, LIFECYCLE, OPENAPI, SCOPES, STREAMS, TRANSACTIONS
from app.domain.errors import DomainError
from app.domain.limits import MAX_REST_BODY_BYTES
from app.services.health import HealthService
from app.services.lifecycle import StreamLifecycle
from app.services.scopes import ScopeService
from app.services.streams import StreamService
from app.services.transactions import TransactionService

log = logging.getLogger(__name__)

OPENAPI_PATH = "/v1/openapi.json"

# Every retryable row answers with this Retry-After (seconds): the REST way of saying what the
# row's gRPC code says to Pravega's clients.
_RETRY_AFTER_S = "1"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _domain_error(request: web.Request, exc: DomainError) -> web.Response:
    """The answer of the exception's row in the error table (app/api/errors.py)."""
    row = row_for(exc)
    if row is UNMAPPED:
        log.error("%s %s: unmapped domain error", request.method, request.path, exc_info=exc)
    elif row.http >= 500:
        log.warning("%s %s: %s", request.method, request.path, exc)
    headers: dict[str, str] | None = {hdrs.RETRY_AFTER: _RETRY_AFTER_S} if row.retryable else None
    return error_response(row.http, message_for(exc), headers=headers)


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return error_response(
            405,
            f"{request.method} is not allowed on {request.path}; allowed: {allowed}",
            headers={hdrs.ALLOW: allowed},
        )
    if isinstance(exc, web.HTTPNotFound):
        return error_response(404, f"no resource at {request.path}")
    # aiohttp's default text is "<status>: <reason>"; a handler's own text is more useful.
    default_text = f"{exc.status}: {exc.reason}"
    message = exc.text if exc.text and exc.text != default_text else exc.reason
    return error_response(exc.status, message)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_error(request, exc)
    except DomainError as exc:
        return _domain_error(request, exc)
    except Exception:
        # The message stays generic: an unexpected error's text may carry internals.
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal server error")


async def _openapi(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


def load_openapi() -> bytes:
    return resources.files("app.api.rest").joinpath("openapi.json").read_bytes()


def create_app(
    scopes: ScopeService,
    streams: StreamService,
    health: HealthService,
    lifecycle: StreamLifecycle,
    transactions: TransactionService,
    extensions: Sequence[Callable[[web.Application], None]] = (),
    auth: Middleware | None = None,
) -> web.Application:
    """`extensions` each add one capability's app keys and routes (e.g. cluster views); `auth` is
    the authentication and authorization middleware (app/api/rest/auth.py), None when auth is off."""
    # A body over the limit is refused while it is read (413, as JSON through json_errors), so
    # no more than the limit of it is ever held.
    middlewares: list[Middleware] = (
        [access_log, json_errors, text_inputs]
        if auth is None
        else [access_log, json_errors, auth, text_inputs]
    )
    app = compat.new_application(middlewares, MAX_REST_BODY_BYTES)
    app[SCOPES] = scopes
    app[STREAMS] = streams
    app[HEALTH] = health
    app[LIFECYCLE] = lifecycle
    app[TRANSACTIONS] = transactions
    app[OPENAPI] = load_openapi()
    app.add_routes(scope_routes.ROUTES)
    app.add_routes(stream_routes.ROUTES)
    app.add_routes(txn_routes.ROUTES)
    app.add_routes(health_routes.ROUTES)
    app.add_routes(compat.ROUTES)
    app.add_routes([web.get(OPENAPI_PATH, _openapi, allow_head=False)])
    for extend in extensions:
        extend(app)
    return app
