"""The gRPC access log and request ids: each call runs with Pravega's tracing request id (the
`requestId` and `requestDescriptor` metadata its clients send, see RPCTracingHelpers) or a new
one, and ends with one INFO line on `pgcontroller.access` (method, status, duration, request id,
peer).

Invariant: the id is set on the call's own task before its handler runs (grpclib's RecvRequest
event runs there), so everything the call logs or enqueues carries it, and no other call does.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass

import grpclib.server
from grpclib.events import RecvRequest, SendTrailingMetadata, listen

from app.observability import context
from app.observability.access_sampling import ADMITTED_ATTR, admit
from app.observability.context import given_or_new
from app.observability.logs import ACCESS_FIELDS_ATTR, ACCESS_LOGGER

# gRPC metadata keys are lower case on the wire: Pravega's `requestId` and `requestDescriptor`.
REQUEST_ID_KEY = "requestid"
REQUEST_DESCRIPTOR_KEY = "requestdescriptor"
# A descriptor names an operation and its stream (`createStream-scope-stream`): bounded in the log.
MAX_DESCRIPTOR_CHARS = 300
log = logging.getLogger(ACCESS_LOGGER)


@dataclass(frozen=True, slots=True)
class _Call:
    method: str
    peer: str
    descriptor: str | None
    started: float


_call: ContextVar[_Call | None] = ContextVar("pgc_grpc_call", default=None)


def _peer(event: RecvRequest) -> str:
    addr = event.peer.addr()
    return f"{addr[0]}:{addr[1]}" if addr else "-"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


async def _on_request(event: RecvRequest) -> None:
    given = _text(event.metadata.get(REQUEST_ID_KEY))
    descriptor = _text(event.metadata.get(REQUEST_DESCRIPTOR_KEY))
    if descriptor is not None:
        descriptor = descriptor[:MAX_DESCRIPTOR_CHARS]
    # The call's task ends with the call, so nothing needs resetting after it.
    context.request_id.set(given_or_new(given))
    _call.set(_Call(event.method_name.rsplit("/", 1)[-1], _peer(event), descriptor, time.perf_counter()))


async def _on_trailers(event: SendTrailingMetadata) -> None:
    call = _call.get()
    if call is None or not log.isEnabledFor(logging.INFO):
        return
    duration_ms = (time.perf_counter() - call.started) * 1000
    request_id = context.request_id.get()
    fields: dict[str, object] = {
        "kind": "grpc",
        "method": call.method,
        "status": event.status.name,
        "duration_ms": round(duration_ms, 3),
        "peer": call.peer,
    }
    if call.descriptor:
        fields["request_descriptor"] = call.descriptor
    if not admit(fields):
        return
    log.info(
        "gRPC %s %s %.1f ms peer=%s request_id=%s",
        call.method,
        event.status.name,
        duration_ms,
        call.peer,
        request_id,
        extra={ACCESS_FIELDS_ATTR: fields, ADMITTED_ATTR: True, "request_id": request_id},
    )


def attach(server: grpclib.server.Server) -> None:
    listen(server, RecvRequest, _on_request)
    listen(server, SendTrailingMetadata, _on_trailers)
