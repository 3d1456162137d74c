"""The REST access log and request ids: every request runs with a request id (the caller's
`X-Request-Id` header, else a new one, echoed in the response) and ends with one INFO line on
`pgcontroller.access` (method, path, status, duration, request id, remote).

Invariant: outermost middleware, so the line carries the status the client got, errors included;
the query string is left out of the line (it may carry values that are not ours to log).
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from app.observability.access_sampling import ADMITTED_ATTR, admit
from app.observability.context import bound, given_or_new
from app.observability.logs import ACCESS_FIELDS_ATTR, ACCESS_LOGGER

REQUEST_ID_HEADER = "X-Request-Id"
log = logging.getLogger(ACCESS_LOGGER)


@web.middleware
async def access_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = given_or_new(request.headers.get(REQUEST_ID_HEADER))
    started = time.perf_counter()
    status = 500
    with bound(request=request_id):
        try:
            response = await handler(request)
            status = response.status
            if not response.prepared:
                response.headers[REQUEST_ID_HEADER] = request_id
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers[REQUEST_ID_HEADER] = request_id
            raise
        finally:
            if log.isEnabledFor(logging.INFO):
                _log_line(request, status, (time.perf_counter() - started) * 1000, request_id)


def _log_line(request: web.Request, status: int, duration_ms: float, request_id: str) -> None:
    remote = request.remote or "-"
    fields = {
        "kind": "rest",
        "method": request.method,
        "path": request.path,
        "status": status,
        "duration_ms": round(duration_ms, 3),
        "remote": remote,
    }
    if not admit(fields):
        return
    log.info(
        "REST %s %s %d %.1f ms remote=%s request_id=%s",
        request.method,
        request.path,
        status,
        duration_ms,
        remote,
        request_id,
        extra={ACCESS_FIELDS_ATTR: fields, ADMITTED_ATTR: True, "request_id": request_id},
    )
