"""Authentication and authorization of every ControllerService RPC when `--auth-enabled`: one
table says which resource each RPC needs and with which permission, as Pravega's
ControllerServiceImpl checks them; listings drop what the caller may not read.

Invariant: every RPC of the contract has a row (a test checks it), so no RPC is served unchecked;
an RPC whose row has no checks is open, as Pravega leaves getControllerServerList open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpclib.server
from google.protobuf.message import Message
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.security import acl
from app.security.acl import Permission
from app.security.authn import AuthenticationFailed, Authenticator, Principal
from app.security.guessing import TooManyAttempts

READ, READ_UPDATE = Permission.READ, Permission.READ_UPDATE
Check = tuple[str, Permission]
Checks = Callable[[Any], Sequence[Check]]
_AccessOp = pb.StreamInfo.AccessOperation


def _stream_of(info: pb.StreamInfo, permission: Permission) -> list[Check]:
    return [(acl.of_stream(info.scope, info.stream), permission)]


def _on_stream(path: Callable[[Any], pb.StreamInfo], permission: Permission) -> Checks:
    return lambda r: _stream_of(path(r), permission)


def _on_internal_aware(path: Callable[[Any], pb.StreamInfo], permission: Permission) -> Checks:
    """StreamAuthParams.toResourceString: reader-group and mark streams as their owners."""
    return lambda r: [(acl.of_stream_or_internal(path(r).scope, path(r).stream), permission)]


def _on(resource: Callable[[Any], str], permission: Permission) -> Checks:
    return lambda r: [(resource(r), permission)]


def _segments_read(path: Callable[[Any], pb.StreamInfo], resource: Callable[[str, str], str]) -> Checks:
    """getCurrentSegments and getSegments: READ for clients that say they need no token
    (accessOperation NONE); older clients also get a token good for writes, so READ_UPDATE."""

    def checks(request: Any) -> list[Check]:
        info = path(request)
        needed = READ if info.accessOperation == _AccessOp.NONE else READ_UPDATE
        return [(resource(info.scope, info.stream), needed)]

    return checks


def _delegation_token(info: pb.StreamInfo) -> list[Check]:
    """ControllerServiceImpl.delegationTokenSupplier's authorization (the token is made elsewhere)."""
    stream_resource = acl.of_stream(info.scope, info.stream)
    operation = info.accessOperation
    if operation == _AccessOp.UNSPECIFIED:
        return [(acl.of_stream_or_internal(info.scope, info.stream), READ_UPDATE)]
    requested = {_AccessOp.READ: READ, _AccessOp.WRITE: READ_UPDATE, _AccessOp.READ_WRITE: READ_UPDATE}.get(
        operation, Permission.NONE
    )
    if not info.stream.startswith(acl.INTERNAL_PREFIX):
        return [(stream_resource, max(requested, READ))]
    needed = acl.permission_for_writes(info.stream) if requested == READ_UPDATE else READ
    return [(acl.of_stream_or_internal(info.scope, info.stream), needed)]


def _itself(r: Any) -> pb.StreamInfo:
    info: pb.StreamInfo = r
    return info


def _stream_info(r: Any) -> pb.StreamInfo:
    info: pb.StreamInfo = r.streamInfo
    return info


def _create_stream(r: pb.StreamConfig) -> list[Check]:
    info = r.streamInfo
    return [(acl.of_scope(info.scope), acl.permission_for_writes(info.stream))]


# Reader-group writes need only READ (Pravega's default for
# `controller.security.rgStreamWritesWithReadPermissions.enabled`).
_RG_WRITE = READ
_OPEN: Checks = lambda r: []  # noqa: E731

RULES: dict[str, Checks] = {
    "getControllerServerList": _OPEN,
    # scopes
    "createScope": _on(lambda r: acl.of_scopes(), READ_UPDATE),
    "deleteScope": _on(lambda r: acl.of_scopes(), READ_UPDATE),
    "deleteScopeRecursive": _on(lambda r: acl.of_scopes(), READ_UPDATE),
    "checkScopeExists": _on(lambda r: acl.of_scope(r.scope), READ),
    "listScopes": _on(lambda r: acl.of_scopes(), READ),
    # streams
    "createStream": _create_stream,
    "getStreamConfiguration": _on_stream(_itself, READ),
    "checkStreamExists": _on_stream(_itself, READ),
    "listStreamsInScope": _on(lambda r: acl.of_scope(r.scope.scope), READ),
    "listStreamsInScopeForTag": _on(lambda r: acl.of_scope(r.scope.scope), READ),
    "updateStream": _on_internal_aware(_stream_info, READ_UPDATE),
    "truncateStream": _on_stream(_stream_info, READ_UPDATE),
    "sealStream": _on_stream(_itself, READ_UPDATE),
    "deleteStream": _on_stream(_itself, READ_UPDATE),
    "scale": _on_stream(_stream_info, READ_UPDATE),
    "checkScale": _on_stream(_stream_info, READ),
    # segments and history
    "getCurrentSegments": _segments_read(_itself, acl.of_stream_or_internal),
    "getSegments": _segments_read(_stream_info, acl.of_stream),
    "getEpochSegments": _on_stream(_stream_info, READ_UPDATE),
    "getSegmentsImmediatelyFollowing": _on_stream(_stream_info, READ),
    "getSegmentsImmediatlyFollowing": _on_stream(_stream_info, READ),
    "getSegmentsBetween": _on_stream(_stream_info, READ),
    "isSegmentValid": _on_stream(_stream_info, READ),
    "isStreamCutValid": _on_stream(_stream_info, READ),
    "getURI": _on_internal_aware(_stream_info, READ),
    "getDelegationToken": lambda r: _delegation_token(r),
    # transactions
    "createTransaction": _on_stream(_stream_info, READ_UPDATE),
    "commitTransaction": _on_stream(_stream_info, READ_UPDATE),
    "abortTransaction": _on_stream(_stream_info, READ_UPDATE),
    "pingTransaction": _on_stream(_stream_info, READ_UPDATE),
    "checkTransactionState": _on_stream(_stream_info, READ),
    "listCompletedTransactions": _on_stream(_stream_info, READ),
    # watermarks and subscribers
    "noteTimestampFromWriter": _on_stream(lambda r: r.position.streamInfo, READ_UPDATE),
    "removeWriter": _on_stream(lambda r: r.stream, READ_UPDATE),
    "listSubscribers": _on_stream(_itself, READ_UPDATE),
    "updateSubscriberStreamCut": _on_stream(lambda r: r.streamCut.streamInfo, READ_UPDATE),
    # reader groups: Pravega checks the scope, not the group
    "createReaderGroup": _on(lambda r: acl.of_scope(r.scope), _RG_WRITE),
    "updateReaderGroup": _on(lambda r: acl.of_scope(r.scope), _RG_WRITE),
    "deleteReaderGroup": _on(lambda r: acl.of_scope(r.scope), _RG_WRITE),
    "getReaderGroupConfig": _on(lambda r: acl.of_scope(r.scope), READ),
    # key-value tables
    "createKeyValueTable": _on(lambda r: acl.of_scope(r.scope), READ_UPDATE),
    "getCurrentSegmentsKeyValueTable": _on(lambda r: acl.of_key_value_table(r.scope, r.kvtName), READ_UPDATE),
    "listKeyValueTablesInScope": _on(lambda r: acl.of_scope(r.scope.scope), READ),
    "getKeyValueTableConfiguration": _on(lambda r: acl.of_key_value_table(r.scope, r.kvtName), READ),
    "deleteKeyValueTable": _on(lambda r: acl.of_key_value_table(r.scope, r.kvtName), READ_UPDATE),
    # cluster
    "getControllerToBucketMapping": _on(lambda r: acl.of_scopes(), READ_UPDATE),
}


@dataclass(frozen=True)
class Listing:
    """How one listing's page is filtered: the names in a response, the resource of each, and
    how to keep only the allowed ones."""

    resource: Callable[[Any, Any], str]  # (request, item) -> resource
    items: Callable[[Any], Any]  # the repeated field of the response


def _clone(item: Any) -> Any:
    """A detached copy of a listed message (a str is its own copy)."""
    if isinstance(item, Message):
        copy = type(item)()
        copy.CopyFrom(item)
        return copy
    return item


def _scope_name(request: Any) -> str:
    name: str = request.scope.scope
    return name


LISTINGS: dict[str, Listing] = {
    "listScopes": Listing(lambda req, name: acl.of_scope(name), lambda resp: resp.scopes),
    "listStreamsInScope": Listing(
        lambda req, s: acl.of_stream(_scope_name(req), s.stream), lambda resp: resp.streams
    ),
    "listStreamsInScopeForTag": Listing(
        lambda req, s: acl.of_stream(_scope_name(req), s.stream), lambda resp: resp.streams
    ),
    "listKeyValueTablesInScope": Listing(
        lambda req, t: acl.of_key_value_table(_scope_name(req), t.kvtName), lambda resp: resp.kvtables
    ),
}
# A page whose every name is hidden is fetched past (Pravega's listWithFilter), at most this
# many times per call, so a caller who may see little of a large scope is still answered.
MAX_HIDDEN_PAGES = 1000


def peer_host(stream: grpclib.server.Stream[Any, Any]) -> str | None:
    """The address a call's connection comes from (the source the guessing limits count by)."""
    addr = stream.peer.addr()
    return str(addr[0]) if addr else None


class GrpcGuard:
    """Checks a call's credentials and rights before its handler runs."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    async def admit(
        self, method: str, authorization: str | None, request: Any, peer: str | None = None
    ) -> Principal | None:
        """The caller's principal, or GRPCError UNAUTHENTICATED / PERMISSION_DENIED, or
        RESOURCE_EXHAUSTED when its credentials need a password check and its address `peer` (or
        the process) is past the guessing limits: Pravega's client retries that status with
        backoff (ControllerImpl's retry policy) but gives up on UNAUTHENTICATED, so a real client
        caught by a limit gets in later, and is not told its password is wrong. An open RPC
        is admitted with no principal when no handler serves its credentials' method (none sent, or
        a method nobody registered: Pravega's interceptors each pass a method not theirs); wrong
        credentials of a served method are refused on any RPC (the handler's interceptor refuses
        them before the call)."""
        checks = RULES.get(method)
        if checks is None:
            raise GRPCError(Status.PERMISSION_DENIED, f"{method} has no authorization rule")
        if checks is _OPEN and not self._authenticator.serves(authorization):
            return None
        principal: Principal | None = None
        if authorization or checks is not _OPEN:
            try:
                principal = await self._authenticator.authenticate(authorization, peer)
            except TooManyAttempts as exc:
                raise GRPCError(Status.RESOURCE_EXHAUSTED, str(exc)) from None
            except AuthenticationFailed as exc:
                if checks is _OPEN and not authorization:
                    return None
                raise GRPCError(Status.UNAUTHENTICATED, str(exc)) from None
        for resource, needed in checks(request):
            assert principal is not None
            if not principal.allows(resource, needed):
                raise GRPCError(
                    Status.PERMISSION_DENIED,
                    f"principal {principal.name} is not allowed {needed.name} access to {resource}",
                )
        return principal

    async def filter_listing(
        self,
        method: str,
        principal: Principal | None,
        request: Any,
        response: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        """The page with only what the principal may READ; a page left empty while more exist is
        followed by the next, so an empty page still means the end (as clients read it)."""
        listing = LISTINGS.get(method)
        if listing is None or principal is None:
            return response
        for _ in range(MAX_HIDDEN_PAGES):
            items = listing.items(response)
            seen = len(items)
            kept = [_clone(item) for item in items if principal.allows(listing.resource(request, item), READ)]
            if kept or not seen or response.continuationToken.token == request.continuationToken.token:
                del items[:]
                items.extend(kept)
                return response
            request.continuationToken.token = response.continuationToken.token
            response = await handler(request)
        del listing.items(response)[:]
        return response
