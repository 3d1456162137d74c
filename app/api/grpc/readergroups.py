"""gRPC RPCs of reader groups: createReaderGroup, getReaderGroupConfig,
updateReaderGroup and deleteReaderGroup, served through ControllerService's `extensions`.

Every outcome Pravega names is a status enum of the contract. A configuration that cannot be decoded
(a malformed id, no starting stream cut, maxOutstandingCheckpointRequest <= 0, an unknown
retention type, a stream named twice) is refused before any work as InvalidInput, which the
error table maps to INVALID_ARGUMENT (Java throws while decoding: INTERNAL; see docs/errors.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from app.api.grpc.convert import statuses_by_name
from app.api.grpc.proto import controller_pb2 as pb
from app.domain.readergroups import (
    Cut,
    ReaderGroupConfig,
    ReaderGroupRecord,
    ScopedStream,
    StreamDataRetention,
    parse_reader_group_id,
    unique_cuts,
)
from app.services.readergroups import (
    CreateStatus,
    DeleteStatus,
    ReaderGroupService,
    UpdateStatus,
)

_CREATE = statuses_by_name(CreateStatus, pb.CreateReaderGroupResponse.Status)
_UPDATE = statuses_by_name(UpdateStatus, pb.UpdateReaderGroupResponse.Status)
_DELETE = statuses_by_name(DeleteStatus, pb.DeleteReaderGroupStatus.Status)


def _cuts_from_proto(cuts: Iterable[pb.StreamCut], what: str) -> dict[ScopedStream, Cut]:
    return unique_cuts(
        ((ScopedStream(c.streamInfo.scope, c.streamInfo.stream), dict(c.cut)) for c in cuts), what
    )


def config_from_proto(msg: pb.ReaderGroupConfiguration) -> ReaderGroupConfig:
    """ModelHelper#encode(ReaderGroupConfiguration) and the builder's checks."""
    config = ReaderGroupConfig(
        starting_stream_cuts=_cuts_from_proto(msg.startingStreamCuts, "starting stream cuts"),
        ending_stream_cuts=_cuts_from_proto(msg.endingStreamCuts, "ending stream cuts"),
        group_refresh_time_ms=msg.groupRefreshTimeMillis,
        automatic_checkpoint_interval_ms=msg.automaticCheckpointIntervalMillis,
        max_outstanding_checkpoint_request=msg.maxOutstandingCheckpointRequest,
        retention=StreamDataRetention.of(msg.retentionType),
    )
    config.validate()
    return config


def _cuts_to_proto(cuts: Mapping[ScopedStream, Cut]) -> list[pb.StreamCut]:
    return [
        pb.StreamCut(streamInfo=pb.StreamInfo(scope=s.scope, stream=s.stream), cut=dict(cut))
        for s, cut in cuts.items()
    ]


def config_to_proto(group: ReaderGroupRecord) -> pb.ReaderGroupConfiguration:
    """ModelHelper#encodeReaderGroupConfigRecord: the stored configuration with the group's
    id and generation (rolloverSizeBytes is not kept)."""
    config = group.config
    return pb.ReaderGroupConfiguration(
        scope=group.scope,
        readerGroupName=group.name,
        groupRefreshTimeMillis=config.group_refresh_time_ms,
        automaticCheckpointIntervalMillis=config.automatic_checkpoint_interval_ms,
        maxOutstandingCheckpointRequest=config.max_outstanding_checkpoint_request,
        retentionType=int(config.retention),
        generation=group.generation,
        readerGroupId=str(group.id),
        startingStreamCuts=_cuts_to_proto(config.starting_stream_cuts),
        endingStreamCuts=_cuts_to_proto(config.ending_stream_cuts),
    )


def _decoded(request: pb.ReaderGroupConfiguration) -> tuple[ReaderGroupConfig, uuid.UUID]:
    """The configuration and the group id, decoded before any other check, as in Java
    (ModelHelper.encode runs before the name check)."""
    return config_from_proto(request), parse_reader_group_id(request.readerGroupId)


class ReaderGroupRpcs:
    def __init__(self, reader_groups: ReaderGroupService) -> None:
        self._groups = reader_groups

    async def rpc_createReaderGroup(
        self, request: pb.ReaderGroupConfiguration
    ) -> pb.CreateReaderGroupResponse:
        config, group_id = _decoded(request)
        result = await self._groups.create_reader_group(
            request.scope, request.readerGroupName, config, group_id
        )
        reply = pb.CreateReaderGroupResponse(status=_CREATE[result.status])
        if result.record is not None:
            reply.config.CopyFrom(config_to_proto(result.record))
        return reply

    async def rpc_getReaderGroupConfig(self, request: pb.ReaderGroupInfo) -> pb.ReaderGroupConfigResponse:
        group = await self._groups.get_reader_group(request.scope, request.readerGroup)
        if group is None:
            return pb.ReaderGroupConfigResponse(
                status=pb.ReaderGroupConfigResponse.RG_NOT_FOUND, config=pb.ReaderGroupConfiguration()
            )
        return pb.ReaderGroupConfigResponse(
            status=pb.ReaderGroupConfigResponse.SUCCESS, config=config_to_proto(group)
        )

    async def rpc_updateReaderGroup(
        self, request: pb.ReaderGroupConfiguration
    ) -> pb.UpdateReaderGroupResponse:
        config, group_id = _decoded(request)
        result = await self._groups.update_reader_group(
            request.scope, request.readerGroupName, config, group_id, request.generation
        )
        return pb.UpdateReaderGroupResponse(status=_UPDATE[result.status], generation=result.generation)

    async def rpc_deleteReaderGroup(self, request: pb.ReaderGroupInfo) -> pb.DeleteReaderGroupStatus:
        status = await self._groups.delete_reader_group(
            request.scope, request.readerGroup, request.readerGroupId
        )
        return pb.DeleteReaderGroupStatus(status=_DELETE[status])
