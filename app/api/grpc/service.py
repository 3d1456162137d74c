"""The gRPC ControllerService (grpclib), wire-compatible with Pravega's Controller.proto.

Handlers are the `rpc_<method>` coroutines below, taking a request message and returning a
response message. The method table is built from the proto descriptor, so every RPC of the
contract is served: those not implemented yet answer UNIMPLEMENTED, never a fake success.
A failure the contract has no status enum for is a domain error, answered with the gRPC status
of its row in the error table shared with REST (app/api/errors.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpclib.const
import grpclib.server
from google.protobuf.message import Message
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.auth import GrpcGuard, peer_host
from app.api.grpc.convert import (
    add_segment_ranges,
    completed_txns_to_proto,
    outcome_to_proto,
    ping_status_to_proto,
    segment_range,
    statuses_by_name,
    stream_config_from_proto,
    txn_id_from_proto,
    txn_id_to_proto,
    txn_state_to_proto,
)
from app.api.grpc.errors import grpc_error_for
from app.api.grpc.preencoded import PreEncoded
from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.reply_cache import ReplyCache, with_token
from app.api.grpc.validation import check_strings
from app.domain.errors import DomainError, InvalidInput, NotFound
from app.domain.names import (
    INTERNAL_SCOPE,
    is_valid_scope_or_stream_name,
    require_present,
    require_scope_name,
    require_stream_name,
)
from app.domain.validation import check_scale_counts
from app.metrics.registry import histogram
from app.ports import ClusterView
from app.security.authn import current_principal
from app.security.delegation import DelegationTokens
from app.security.tokens import Permission
from app.services.deletion import DeleteScopeOutcome, DeleteStreamOutcome
from app.services.lifecycle import StreamLifecycle
from app.services.paging import Page
from app.services.scaling import CheckScaleOutcome, ScaleOutcomeStatus
from app.services.scopes import ScopeOutcome, ScopeService
from app.services.segments import SegmentQueries
from app.services.stream_updates import UpdateOutcome
from app.services.streams import CreateStreamOutcome, StreamService
from app.services.transactions import TransactionService

log = logging.getLogger(__name__)

SERVICE_NAME = "io.pravega.controller.stream.api.grpc.v1.ControllerService"
_NO_TOKEN = ""  # Pravega's answer where a call carries no token (getSegmentsImmediatelyFollowing)
_AccessOp = pb.StreamInfo.AccessOperation
# StreamAuthParams.requestedPermission: what getDelegationToken grants per access operation
# (an older client sends UNSPECIFIED and gets read-and-write).
_TOKEN_PERMISSION = {
    _AccessOp.UNSPECIFIED: Permission.READ_UPDATE,
    _AccessOp.WRITE: Permission.READ_UPDATE,
    _AccessOp.READ_WRITE: Permission.READ_UPDATE,
}

_CREATE_SCOPE = {
    ScopeOutcome.SUCCESS: pb.CreateScopeStatus.SUCCESS,
    ScopeOutcome.EXISTS: pb.CreateScopeStatus.SCOPE_EXISTS,
    ScopeOutcome.INVALID_NAME: pb.CreateScopeStatus.INVALID_SCOPE_NAME,
}
_DELETE_SCOPE = {
    ScopeOutcome.SUCCESS: pb.DeleteScopeStatus.SUCCESS,
    ScopeOutcome.NOT_FOUND: pb.DeleteScopeStatus.SCOPE_NOT_FOUND,
    ScopeOutcome.NOT_EMPTY: pb.DeleteScopeStatus.SCOPE_NOT_EMPTY,
}
_CREATE_STREAM = statuses_by_name(
    CreateStreamOutcome,
    pb.CreateStreamStatus.Status,
    EXISTS="STREAM_EXISTS",
    INVALID_NAME="INVALID_STREAM_NAME",
)
_UPDATE_STREAM = statuses_by_name(UpdateOutcome, pb.UpdateStreamStatus.Status)
_DELETE_STREAM = statuses_by_name(DeleteStreamOutcome, pb.DeleteStreamStatus.Status)
_DELETE_SCOPE_RECURSIVE = statuses_by_name(DeleteScopeOutcome, pb.DeleteScopeStatus.Status)
_SCALE = statuses_by_name(ScaleOutcomeStatus, pb.ScaleResponse.ScaleStreamStatus)
_CHECK_SCALE = statuses_by_name(CheckScaleOutcome, pb.ScaleStatusResponse.ScaleStatus)

Handler = Callable[[Any], Awaitable[Message | PreEncoded]]


class ControllerService:
    def __init__(
        self,
        scopes: ScopeService,
        streams: StreamService,
        segments: SegmentQueries,
        cluster: ClusterView,
        lifecycle: StreamLifecycle,
        transactions: TransactionService,
        extensions: Sequence[object] = (),
        guard: GrpcGuard | None = None,
        tokens: DelegationTokens | None = None,
        metrics: bool = False,
    ) -> None:
        """`extensions` are objects whose own `rpc_<method>` coroutines serve more RPCs of the
        contract (one object per capability, e.g. watermarks), so this class stays small.
        `guard` authenticates and authorizes every call (app/api/grpc/auth.py); None: auth off.
        `metrics`: each call's duration goes to the latency histogram by method and status."""
        self._metrics = metrics
        self._extensions = tuple(extensions)
        self._guard = guard
        self._scopes = scopes
        self._streams = streams
        self._segments = segments
        self._cluster = cluster
        self._lifecycle = lifecycle
        self._transactions = transactions
        # Signs the `delegationToken` of answers when authentication is on ("" while off).
        self._tokens = tokens or DelegationTokens(None)
        # The hot reads' reply bytes, reused while what they were built from is unchanged.
        self._replies = ReplyCache()

    # --- grpclib plumbing -----------------------------------------------------------------

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        mapping: dict[str, grpclib.const.Handler] = {}
        descriptor = pb.DESCRIPTOR.services_by_name["ControllerService"]
        for method in descriptor.methods:
            request_type = _message_class(method.input_type.name)
            response_type = _message_class(method.output_type.name)
            handler: Handler | None = self._handler(f"rpc_{method.name}")
            mapping[f"/{SERVICE_NAME}/{method.name}"] = grpclib.const.Handler(
                _unary(method.name, handler, self._guard, _Latency(method.name) if self._metrics else None),
                grpclib.const.Cardinality.UNARY_UNARY,
                request_type,
                response_type,
            )
        return mapping

    def _handler(self, attribute: str) -> Handler | None:
        for provider in (self, *self._extensions):
            handler: Handler | None = getattr(provider, attribute, None)
            if handler is not None:
                return handler
        return None

    # --- scopes ---------------------------------------------------------------------------

    async def rpc_createScope(self, request: pb.ScopeInfo) -> pb.CreateScopeStatus:
        outcome = await self._scopes.create_scope(request.scope)
        return pb.CreateScopeStatus(status=_CREATE_SCOPE[outcome])

    async def rpc_deleteScope(self, request: pb.ScopeInfo) -> pb.DeleteScopeStatus:
        outcome = await self._scopes.delete_scope(request.scope)
        return pb.DeleteScopeStatus(status=_DELETE_SCOPE[outcome])

    async def rpc_deleteScopeRecursive(self, request: pb.ScopeInfo) -> pb.DeleteScopeStatus:
        outcome = await self._lifecycle.deletion.delete_scope_recursive(request.scope)
        return pb.DeleteScopeStatus(status=_DELETE_SCOPE_RECURSIVE[outcome])

    async def rpc_checkScopeExists(self, request: pb.ScopeInfo) -> pb.ExistsResponse:
        return pb.ExistsResponse(exists=await self._scopes.scope_exists(request.scope))

    async def rpc_listScopes(self, request: pb.ScopesRequest) -> pb.ScopesResponse:
        page = await self._scopes.list_scopes_with_internal(request.continuationToken.token)
        return pb.ScopesResponse(scopes=page.names, continuationToken=pb.ContinuationToken(token=page.token))

    # --- streams --------------------------------------------------------------------------

    async def rpc_createStream(self, request: pb.StreamConfig) -> pb.CreateStreamStatus:
        info = request.streamInfo
        if not info.stream:
            raise InvalidInput("stream name must not be empty")
        if not is_valid_scope_or_stream_name(info.stream):
            # The name check comes before any other, as in Java: INVALID_STREAM_NAME wins.
            return pb.CreateStreamStatus(status=pb.CreateStreamStatus.INVALID_STREAM_NAME)
        config = stream_config_from_proto(request)
        outcome = await self._streams.create_stream(info.scope, info.stream, config)
        return pb.CreateStreamStatus(status=_CREATE_STREAM[outcome])

    async def rpc_getStreamConfiguration(self, request: pb.StreamInfo) -> PreEncoded:
        if not _well_formed(request):
            raise NotFound(f"stream {request.scope}/{request.stream} not found")
        config = await self._streams.get_config(request.scope, request.stream)
        return PreEncoded(self._replies.stream_config(request.scope, request.stream, config), pb.StreamConfig)

    async def rpc_checkStreamExists(self, request: pb.StreamInfo) -> pb.ExistsResponse:
        if not _well_formed(request):
            return pb.ExistsResponse(exists=False)
        return pb.ExistsResponse(exists=await self._streams.stream_exists(request.scope, request.stream))

    async def rpc_listStreamsInScope(self, request: pb.StreamsInScopeRequest) -> pb.StreamsInScopeResponse:
        scope, token = request.scope.scope, request.continuationToken.token
        return await _streams_listed(scope, token, self._streams.list_streams(scope, token))

    async def rpc_listStreamsInScopeForTag(
        self, request: pb.StreamsInScopeWithTagRequest
    ) -> pb.StreamsInScopeResponse:
        scope, token = request.scope.scope, request.continuationToken.token
        return await _streams_listed(
            scope, token, self._streams.list_streams_for_tag(scope, request.tag, token)
        )

    # --- stream lifecycle -----------------------------------------------------------------

    async def rpc_updateStream(self, request: pb.StreamConfig) -> pb.UpdateStreamStatus:
        info = request.streamInfo
        if not _well_formed(info):
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)
        config = stream_config_from_proto(request)
        outcome = await self._lifecycle.updates.update_stream(info.scope, info.stream, config)
        return pb.UpdateStreamStatus(status=_UPDATE_STREAM[outcome])

    async def rpc_truncateStream(self, request: pb.StreamCut) -> pb.UpdateStreamStatus:
        info = request.streamInfo
        if not _well_formed(info):
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)
        outcome = await self._lifecycle.truncation.truncate_stream(info.scope, info.stream, dict(request.cut))
        return pb.UpdateStreamStatus(status=_UPDATE_STREAM[outcome])

    async def rpc_sealStream(self, request: pb.StreamInfo) -> pb.UpdateStreamStatus:
        if not _well_formed(request):
            return pb.UpdateStreamStatus(status=pb.UpdateStreamStatus.STREAM_NOT_FOUND)
        outcome = await self._lifecycle.sealing.seal_stream(request.scope, request.stream)
        return pb.UpdateStreamStatus(status=_UPDATE_STREAM[outcome])

    async def rpc_deleteStream(self, request: pb.StreamInfo) -> pb.DeleteStreamStatus:
        if not _well_formed(request):
            return pb.DeleteStreamStatus(status=pb.DeleteStreamStatus.STREAM_NOT_FOUND)
        outcome = await self._lifecycle.deletion.delete_stream(request.scope, request.stream)
        return pb.DeleteStreamStatus(status=_DELETE_STREAM[outcome])

    async def rpc_scale(self, request: pb.ScaleRequest) -> pb.ScaleResponse:
        info = request.streamInfo
        if not _well_formed(info):
            return pb.ScaleResponse(status=pb.ScaleResponse.FAILURE)  # Pravega's answer for a missing stream
        # Counted before anything is converted: a 4 MiB request can carry some 200,000 ranges.
        check_scale_counts(len(request.sealedSegments), len(request.newKeyRanges))
        ranges = [(entry.start, entry.end) for entry in request.newKeyRanges]
        outcome = await self._lifecycle.scaling.scale(
            info.scope, info.stream, list(request.sealedSegments), ranges, request.scaleTimestamp
        )
        response = pb.ScaleResponse(status=_SCALE[outcome.status], epoch=outcome.epoch)
        await add_segment_ranges(response.segments, info.scope, info.stream, outcome.segments)
        return response

    async def rpc_checkScale(self, request: pb.ScaleStatusRequest) -> pb.ScaleStatusResponse:
        info = request.streamInfo
        if not _well_formed(info):
            return pb.ScaleStatusResponse(status=pb.ScaleStatusResponse.INVALID_INPUT)
        outcome = await self._lifecycle.scaling.check_scale(info.scope, info.stream, request.epoch)
        return pb.ScaleStatusResponse(status=_CHECK_SCALE[outcome])

    # --- history queries -------------------------------------------------------------------

    async def rpc_getSegmentsImmediatelyFollowing(self, request: pb.SegmentId) -> pb.SuccessorResponse:
        info = request.streamInfo
        successors = await self._lifecycle.history.successors(info.scope, info.stream, request.segmentId)
        return pb.SuccessorResponse(
            segments=[
                pb.SuccessorResponse.SegmentEntry(
                    segment=segment_range(info.scope, info.stream, segment), value=predecessors
                )
                for segment, predecessors in successors
            ],
            delegationToken=_NO_TOKEN,
        )

    async def rpc_getSegmentsImmediatlyFollowing(self, request: pb.SegmentId) -> pb.SuccessorResponse:
        """Pravega's deprecated misspelling; same answer."""
        return await self.rpc_getSegmentsImmediatelyFollowing(request)

    async def rpc_getSegmentsBetween(self, request: pb.StreamCutRange) -> pb.StreamCutRangeResponse:
        info = request.streamInfo
        segments = await self._lifecycle.history.segments_between(
            info.scope, info.stream, dict(getattr(request, "from")), dict(request.to)
        )
        stream_info = pb.StreamInfo(scope=info.scope, stream=info.stream)
        return pb.StreamCutRangeResponse(
            segments=[pb.SegmentId(streamInfo=stream_info, segmentId=s) for s in segments],
            delegationToken=self._tokens.for_stream(info.scope, info.stream, Permission.READ),
        )

    async def rpc_isStreamCutValid(self, request: pb.StreamCut) -> pb.StreamCutValidityResponse:
        info = request.streamInfo
        valid = await self._lifecycle.history.is_stream_cut_valid(info.scope, info.stream, dict(request.cut))
        return pb.StreamCutValidityResponse(response=valid)

    # --- segments -------------------------------------------------------------------------

    async def rpc_getCurrentSegments(self, request: pb.StreamInfo) -> PreEncoded:
        segments = await self._segments.current_segments(request.scope, request.stream)
        body = await self._replies.segment_ranges(request.scope, request.stream, segments)
        return with_token(body, pb.SegmentRanges, self._segments_token(request))

    async def rpc_getEpochSegments(self, request: pb.GetEpochSegmentsRequest) -> pb.SegmentRanges:
        info = request.streamInfo
        segments = await self._segments.epoch_segments(info.scope, info.stream, request.epoch)
        token = self._tokens.for_stream(info.scope, info.stream, Permission.READ_UPDATE)
        response = pb.SegmentRanges(delegationToken=token)
        await add_segment_ranges(response.segmentRanges, info.scope, info.stream, segments)
        return response

    async def rpc_getSegments(self, request: pb.GetSegmentsRequest) -> PreEncoded:
        info = request.streamInfo
        head = await self._segments.head(info.scope, info.stream)
        body = self._replies.segments_at_head(info.scope, info.stream, head)
        return with_token(body, pb.SegmentsAtTime, self._segments_token(info))

    async def rpc_isSegmentValid(self, request: pb.SegmentId) -> pb.SegmentValidityResponse:
        info = request.streamInfo
        valid = await self._segments.is_segment_valid(info.scope, info.stream, request.segmentId)
        return pb.SegmentValidityResponse(response=valid)

    async def rpc_getURI(self, request: pb.SegmentId) -> PreEncoded:
        info = request.streamInfo
        owner = self._segments.uri(info.scope, info.stream, request.segmentId)
        return PreEncoded(self._replies.node_uri(owner.host, owner.port), pb.NodeUri)

    # --- transactions ---------------------------------------------------------------------

    async def rpc_createTransaction(self, request: pb.CreateTxnRequest) -> PreEncoded:
        # scaleGracePeriod is deprecated and ignored, as in Pravega.
        scope, stream = _stream_names(request.streamInfo)
        created = await self._transactions.create(scope, stream, request.lease)
        token = self._tokens.for_stream(scope, stream, Permission.READ_UPDATE)
        # Fields of one message concatenate: this caller's txnId, the epoch's (cached) segments,
        # this caller's token.
        txn_id = pb.CreateTxnResponse(txnId=txn_id_to_proto(created.txn)).SerializeToString()
        segments = await self._replies.active_segments(scope, stream, created.segments)
        return with_token(txn_id + segments, pb.CreateTxnResponse, token)

    async def rpc_pingTransaction(self, request: pb.PingTxnRequest) -> pb.PingTxnStatus:
        scope, stream = _stream_names(request.streamInfo)
        status = await self._transactions.ping(scope, stream, txn_id_from_proto(request.txnId), request.lease)
        return ping_status_to_proto(status)

    async def rpc_checkTransactionState(self, request: pb.TxnRequest) -> pb.TxnState:
        scope, stream = _stream_names(request.streamInfo)
        status = await self._transactions.state(scope, stream, txn_id_from_proto(request.txnId))
        return txn_state_to_proto(status)

    async def rpc_commitTransaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        scope, stream = _stream_names(request.streamInfo)
        # The timestamp only means something with a writer id; the service also drops
        # Long.MIN_VALUE, the client's "no timestamp".
        outcome = await self._transactions.commit(
            scope,
            stream,
            txn_id_from_proto(request.txnId),
            writer_id=request.writerId,
            timestamp=request.timestamp if request.writerId else None,
        )
        return outcome_to_proto(outcome)

    async def rpc_abortTransaction(self, request: pb.TxnRequest) -> pb.TxnStatus:
        scope, stream = _stream_names(request.streamInfo)
        outcome = await self._transactions.abort(scope, stream, txn_id_from_proto(request.txnId))
        return outcome_to_proto(outcome)

    async def rpc_listCompletedTransactions(
        self, request: pb.ListCompletedTxnRequest
    ) -> pb.ListCompletedTxnResponse:
        scope, stream = _stream_names(request.streamInfo)
        return completed_txns_to_proto(await self._transactions.list_completed(scope, stream))

    # --- cluster and security -------------------------------------------------------------

    async def rpc_getControllerServerList(self, request: pb.ServerRequest) -> pb.ServerResponse:
        live = await self._cluster.live_controllers()
        return pb.ServerResponse(nodeURI=[pb.NodeUri(endpoint=c.host, port=c.port) for c in live])

    async def rpc_getDelegationToken(self, request: pb.StreamInfo) -> pb.DelegationToken:
        wanted = _TOKEN_PERMISSION.get(request.accessOperation, Permission.READ)
        token = self._tokens.for_stream(request.scope, request.stream, wanted)
        return pb.DelegationToken(delegationToken=token)

    def _segments_token(self, info: pb.StreamInfo) -> str:
        """getCurrentSegments and getSegments: a read-and-write token unless the caller says it
        wants no access (AccessOperation NONE), as Pravega answers older clients."""
        if info.accessOperation == _AccessOp.NONE:
            return _NO_TOKEN
        return self._tokens.for_stream(info.scope, info.stream, Permission.READ_UPDATE)


async def _streams_listed(scope: str, token: str, listing: Awaitable[Page]) -> pb.StreamsInScopeResponse:
    """The page `listing` reads; a scope that is missing answers SCOPE_NOT_FOUND, except the
    internal scope, always listed and found: without a row, it holds no streams."""
    try:
        page = await listing
    except NotFound:
        if scope == INTERNAL_SCOPE:
            return _streams_page(scope, [], token)
        return pb.StreamsInScopeResponse(
            status=pb.StreamsInScopeResponse.SCOPE_NOT_FOUND,
            continuationToken=pb.ContinuationToken(token=token),
        )
    return _streams_page(scope, page.names, page.token)


def _streams_page(scope: str, names: list[str], token: str) -> pb.StreamsInScopeResponse:
    return pb.StreamsInScopeResponse(
        streams=[pb.StreamInfo(scope=scope, stream=name) for name in names],
        continuationToken=pb.ContinuationToken(token=token),
        status=pb.StreamsInScopeResponse.SUCCESS,
    )


def _well_formed(info: pb.StreamInfo) -> bool:
    """False for names outside Pravega's rule, which can name no stream: the RPC then answers its
    contract's not-found status without a query. Empty names still fail (InvalidInput), as before."""
    require_present("scope", info.scope)
    require_present("stream", info.stream)
    return is_valid_scope_or_stream_name(info.scope) and is_valid_scope_or_stream_name(info.stream)


def _stream_names(info: pb.StreamInfo) -> tuple[str, str]:
    """Empty or ill-formed names fail before any work (InvalidInput): no such stream can exist."""
    require_scope_name(info.scope)
    require_stream_name(info.stream)
    return info.scope, info.stream


def _authorization(stream: grpclib.server.Stream[Any, Any]) -> str | None:
    """The `authorization` metadata Pravega's clients send (grpclib lower-cases names)."""
    metadata = stream.metadata
    value = metadata.get("authorization") if metadata is not None else None
    return value if isinstance(value, str) else None


def _message_class(name: str) -> type[Message]:
    cls: type[Message] = getattr(pb, name)
    return cls


class _Latency:
    """One method's latency histogram children, made once per status: a call costs a dict hit."""

    def __init__(self, method: str) -> None:
        self._method = method
        self._by_status: dict[Status, Any] = {}

    def observe(self, status: Status, seconds: float) -> None:
        child = self._by_status.get(status)
        if child is None:
            child = _RPC_LATENCY.labels(self._method, status.name)
            self._by_status[status] = child
        child.observe(seconds)


_RPC_LATENCY = histogram("pgcontroller_grpc_request_duration_seconds")


def _unary(
    method: str, handler: Handler | None, guard: GrpcGuard | None = None, latency: _Latency | None = None
) -> Callable[[grpclib.server.Stream[Any, Any]], Awaitable[None]]:
    if latency is None:
        return _serve(method, handler, guard)
    inner = _serve(method, handler, guard)

    async def timed(stream: grpclib.server.Stream[Any, Any]) -> None:
        start = time.perf_counter()
        status = Status.OK
        try:
            await inner(stream)
        except GRPCError as exc:
            status = exc.status
            raise
        except BaseException:
            status = Status.UNKNOWN
            raise
        finally:
            latency.observe(status, time.perf_counter() - start)

    return timed


def _serve(
    method: str, handler: Handler | None, guard: GrpcGuard | None
) -> Callable[[grpclib.server.Stream[Any, Any]], Awaitable[None]]:
    async def serve(stream: grpclib.server.Stream[Any, Any]) -> None:
        request = await stream.recv_message()
        principal = None
        try:
            if guard is not None:
                principal = await guard.admit(method, _authorization(stream), request, peer_host(stream))
                current_principal.set(principal)
            if handler is None:
                raise GRPCError(Status.UNIMPLEMENTED, f"{method} is not implemented by pgcontroller yet")
            if request is not None:
                check_strings(request)
            response = await handler(request)
            if guard is not None:
                response = await guard.filter_listing(method, principal, request, response, handler)
        except DomainError as exc:
            raise grpc_error_for(exc) from exc
        except GRPCError:
            raise
        except Exception as exc:
            log.exception("unexpected failure in %s", method)
            raise GRPCError(Status.INTERNAL, f"internal error in {method}") from exc
        await stream.send_message(response)

    return serve
