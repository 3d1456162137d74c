"""The key-value table RPCs of ControllerService, served as an extension.

Outcomes Pravega reports as status enums come back as enums; a bad configuration is an
InvalidInput, which the service's error mapping turns into INVALID_ARGUMENT, as for streams.
"""

from __future__ import annotations

from app.api.grpc.convert import segment_range, statuses_by_name
from app.api.grpc.proto import controller_pb2 as pb
from app.domain.errors import NotFound, StoreUnavailable
from app.domain.kvtables import KvtConfig
from app.domain.names import INTERNAL_SCOPE
from app.security.delegation import DelegationTokens
from app.security.tokens import Permission
from app.services.kvtables import CreateKvtOutcome, DeleteKvtOutcome, KvtService

_CREATE = statuses_by_name(CreateKvtOutcome, pb.CreateKeyValueTableStatus.Status)
_DELETE = statuses_by_name(DeleteKvtOutcome, pb.DeleteKVTableStatus.Status)


class KvtRpcs:
    def __init__(self, kvts: KvtService, tokens: DelegationTokens | None = None) -> None:
        self._kvts = kvts
        # Signs getCurrentSegmentsKeyValueTable's token when authentication is on ("" while off).
        self._tokens = tokens or DelegationTokens(None)

    async def rpc_createKeyValueTable(self, request: pb.KeyValueTableConfig) -> pb.CreateKeyValueTableStatus:
        config = KvtConfig(
            partition_count=request.partitionCount,
            primary_key_length=request.primaryKeyLength,
            secondary_key_length=request.secondaryKeyLength,
            rollover_size_bytes=request.rolloverSizeBytes,
        )
        outcome = await self._kvts.create_kvt(request.scope, request.kvtName, config)
        return pb.CreateKeyValueTableStatus(status=_CREATE[outcome])

    async def rpc_getCurrentSegmentsKeyValueTable(self, request: pb.KeyValueTableInfo) -> pb.SegmentRanges:
        segments = await self._kvts.current_segments(request.scope, request.kvtName)
        return pb.SegmentRanges(
            segmentRanges=[segment_range(request.scope, request.kvtName, s) for s in segments],
            delegationToken=self._tokens.for_table(request.scope, request.kvtName, Permission.READ_UPDATE),
        )

    async def rpc_listKeyValueTablesInScope(
        self, request: pb.KVTablesInScopeRequest
    ) -> pb.KVTablesInScopeResponse:
        scope = request.scope.scope
        token = request.continuationToken.token
        try:
            page = await self._kvts.list_kvts(scope, token)
        except NotFound:
            if scope == INTERNAL_SCOPE:
                # Always listed and found (checkScopeExists): without a row, it holds no tables.
                return pb.KVTablesInScopeResponse(
                    continuationToken=pb.ContinuationToken(token=token),
                    status=pb.KVTablesInScopeResponse.SUCCESS,
                )
            return pb.KVTablesInScopeResponse(
                status=pb.KVTablesInScopeResponse.SCOPE_NOT_FOUND,
                continuationToken=pb.ContinuationToken(token=token),
            )
        return pb.KVTablesInScopeResponse(
            kvtables=[pb.KeyValueTableInfo(scope=scope, kvtName=name) for name in page.names],
            continuationToken=pb.ContinuationToken(token=page.token),
            status=pb.KVTablesInScopeResponse.SUCCESS,
        )

    async def rpc_getKeyValueTableConfiguration(
        self, request: pb.KeyValueTableInfo
    ) -> pb.KeyValueTableConfigResponse:
        try:
            config = await self._kvts.get_config(request.scope, request.kvtName)
        except NotFound:
            return pb.KeyValueTableConfigResponse(status=pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND)
        except StoreUnavailable:
            # Java answers any other store failure with the FAILURE status, not a gRPC error.
            return pb.KeyValueTableConfigResponse(status=pb.KeyValueTableConfigResponse.FAILURE)
        return pb.KeyValueTableConfigResponse(
            config=pb.KeyValueTableConfig(
                scope=request.scope,
                kvtName=request.kvtName,
                partitionCount=config.partition_count,
                primaryKeyLength=config.primary_key_length,
                secondaryKeyLength=config.secondary_key_length,
                rolloverSizeBytes=config.rollover_size_bytes,
            ),
            status=pb.KeyValueTableConfigResponse.SUCCESS,
        )

    async def rpc_deleteKeyValueTable(self, request: pb.KeyValueTableInfo) -> pb.DeleteKVTableStatus:
        outcome = await self._kvts.delete_kvt(request.scope, request.kvtName)
        return pb.DeleteKVTableStatus(status=_DELETE[outcome])
