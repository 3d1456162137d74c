"""Authentication and authorization of the REST routes when `--auth-enabled`: one table says which
resource each route needs and with which permission (Pravega's StreamMetadataResourceImpl for the
/v1 paths it has; the root resource for the cluster, parked-request and scale-report routes), and
listings drop what the caller may not read.

Invariants: health, the OpenAPI document and the metrics scrape paths stay open; a route without
a row is refused (a test checks every route has one); 401 always carries `WWW-Authenticate`;
bodies never echo credentials.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from app.api.rest.http import error_response
from app.security import acl
from app.security.acl import Permission
from app.security.authn import AuthenticationFailed, Authenticator, Principal
from app.security.guessing import TooManyAttempts

READ, READ_UPDATE = Permission.READ, Permission.READ_UPDATE
REALM = "pgcontroller"
PRINCIPAL = web.RequestKey("pgcontroller.principal", Principal)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Resource = Callable[[Mapping[str, str]], str]

OPEN_PREFIXES = ("/v1/health",)
# The scrape paths stay open as health does (Prometheus carries no credentials), and so does
# Pravega's /ping.
OPEN_PATHS = frozenset({"/v1/openapi.json", "/prometheus", "/metrics", "/ping"})


def _root(_: Mapping[str, str]) -> str:
    return acl.of_scopes()


def _scope(m: Mapping[str, str]) -> str:
    return acl.of_scope(m["scopeName"])


def _stream(m: Mapping[str, str]) -> str:
    return acl.of_stream(m["scopeName"], m["streamName"])


def _reader_group(m: Mapping[str, str]) -> str:
    return acl.of_reader_group(m["scopeName"], m["readerGroupName"])


_STREAM = "/v1/scopes/{scopeName}/streams/{streamName}"
_GROUP = "/v1/scopes/{scopeName}/readergroups/{readerGroupName}"
# (method, route pattern) -> (resource, permission). Operator routes of our own (cluster,
# customized states, parked requests, scale reports) need the root resource: READ to look,
# READ_UPDATE to change anything, since they steer the whole cluster.
RULES: dict[tuple[str, str], tuple[Resource, Permission]] = {
    ("GET", "/v1/scopes"): (_root, READ),
    ("POST", "/v1/scopes"): (_root, READ_UPDATE),
    ("GET", "/v1/scopes/{scopeName}"): (_scope, READ),
    ("DELETE", "/v1/scopes/{scopeName}"): (_root, READ_UPDATE),
    ("GET", "/v1/scopes/{scopeName}/streams"): (_scope, READ),
    ("POST", "/v1/scopes/{scopeName}/streams"): (_scope, READ_UPDATE),
    ("GET", _STREAM): (_stream, READ),
    ("PUT", _STREAM): (_stream, READ_UPDATE),
    ("DELETE", _STREAM): (_stream, READ_UPDATE),
    ("PUT", _STREAM + "/state"): (_stream, READ_UPDATE),
    ("GET", _STREAM + "/scaling-events"): (_stream, READ),
    ("GET", _STREAM + "/transactions"): (_stream, READ),
    ("GET", _STREAM + "/transactions/{txnId}"): (_stream, READ),
    ("GET", _STREAM + "/watermarks"): (_stream, READ),
    ("GET", _STREAM + "/storage"): (_stream, READ),
    ("POST", _STREAM + "/scale-reports"): (_root, READ_UPDATE),
    ("GET", "/v1/scopes/{scopeName}/readergroups"): (_scope, READ),
    ("GET", _GROUP): (_reader_group, READ),
    ("DELETE", _GROUP): (_reader_group, READ_UPDATE),
}
_ROOT_PREFIXES = ("/v1/cluster/", "/v1/requests/")


def rule_for(method: str, pattern: str) -> tuple[Resource, Permission] | None:
    rule = RULES.get((method, pattern))
    if rule is None and pattern.startswith(_ROOT_PREFIXES):
        return (_root, READ if method in ("GET", "HEAD") else READ_UPDATE)
    return rule


@dataclass(frozen=True)
class Listing:
    key: str  # the array in the body
    name: str  # each element's name member
    resource: Callable[[Mapping[str, str], str], str]


LISTINGS: dict[tuple[str, str], Listing] = {
    ("GET", "/v1/scopes"): Listing("scopes", "scopeName", lambda m, n: acl.of_scope(n)),
    ("GET", "/v1/scopes/{scopeName}/streams"): Listing(
        "streams", "streamName", lambda m, n: acl.of_stream(m["scopeName"], n)
    ),
}


def unauthorized(message: str, methods: tuple[str, ...] = ("Basic",)) -> web.Response:
    """401 with one challenge per supported method (RFC 9110 allows several in one header)."""
    challenges = ", ".join(f'{method} realm="{REALM}"' for method in methods)
    return error_response(401, message, headers={hdrs.WWW_AUTHENTICATE: challenges})


def auth_middleware(authenticator: Authenticator) -> Middleware:
    @web.middleware
    async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route
        pattern = route.resource.canonical if route.resource is not None else None
        # By the route, not the raw path: `/v1/scopes/` and HEAD resolve to a canonical GET route
        # (app/api/rest/compat.py) and take that route's rule.
        path = pattern if pattern is not None else request.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return await handler(request)
        if pattern is None or request.match_info.http_exception is not None:
            return await handler(request)  # 404 / 405: nothing is read or changed
        try:
            principal = await authenticator.authenticate(
                request.headers.get(hdrs.AUTHORIZATION), request.remote
            )
        except TooManyAttempts as exc:
            # 429, as gRPC answers RESOURCE_EXHAUSTED: come back later, not "wrong credentials".
            retry_after = str(max(1, math.ceil(exc.retry_after_s)))
            return error_response(429, str(exc), headers={hdrs.RETRY_AFTER: retry_after})
        except AuthenticationFailed as exc:
            return unauthorized(str(exc), authenticator.methods)
        request[PRINCIPAL] = principal
        rule = rule_for(route.method, pattern)
        if rule is None:
            return error_response(403, f"{request.method} {pattern} has no authorization rule")
        resource_of, needed = rule
        resource = resource_of(request.match_info)
        if not principal.allows(resource, needed):
            return error_response(
                403, f"principal {principal.name} is not allowed {needed.name} access to {resource}"
            )
        response = await handler(request)
        listing = LISTINGS.get((route.method, pattern))
        if listing is not None and isinstance(response, web.Response) and response.status == 200:
            return _filtered(response, listing, request.match_info, principal)
        return response

    return authorize


def _filtered(
    response: web.Response, listing: Listing, match: Mapping[str, str], principal: Principal
) -> web.Response:
    """The listing with only the elements the principal may READ (Pravega filters its listings so)."""
    body = response.body
    if not isinstance(body, bytes):
        return response
    document = json.loads(body)
    items = document.get(listing.key)
    if not isinstance(items, list):
        return response
    document[listing.key] = [
        item
        for item in items
        if isinstance(item, dict)
        and principal.allows(listing.resource(match, str(item.get(listing.name))), READ)
    ]
    return web.json_response(document, status=response.status, headers=_kept_headers(response))


def _kept_headers(response: web.Response) -> dict[str, str]:
    dropped = {hdrs.CONTENT_LENGTH.lower(), hdrs.CONTENT_TYPE.lower()}
    return {k: v for k, v in response.headers.items() if k.lower() not in dropped}
