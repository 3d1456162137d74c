"""The watermark RPCs of the controller contract, served through
ControllerService's extensions: noteTimestampFromWriter and removeWriter.

Outcomes are the proto's status enums; a missing stream on noteTimestamp is gRPC NOT_FOUND and
a mark that kept changing FAILED_PRECONDITION, as Java's store errors surface (ControllerService
maps the domain errors).
"""

from __future__ import annotations

from app.api.grpc.convert import statuses_by_name
from app.api.grpc.proto import controller_pb2 as pb
from app.domain.watermarks import NoteOutcome, RemoveOutcome
from app.services.watermarks import WatermarkService

_NOTE = statuses_by_name(NoteOutcome, pb.TimestampResponse.Status)
_REMOVE = statuses_by_name(RemoveOutcome, pb.RemoveWriterResponse.Status)


class WatermarkRpcs:
    def __init__(self, watermarks: WatermarkService) -> None:
        self._watermarks = watermarks

    async def rpc_noteTimestampFromWriter(self, request: pb.TimestampFromWriter) -> pb.TimestampResponse:
        info = request.position.streamInfo
        outcome = await self._watermarks.note_timestamp(
            info.scope, info.stream, request.writer, dict(request.position.cut), request.timestamp
        )
        return pb.TimestampResponse(result=_NOTE[outcome])

    async def rpc_removeWriter(self, request: pb.RemoveWriterRequest) -> pb.RemoveWriterResponse:
        outcome = await self._watermarks.remove_writer(
            request.stream.scope, request.stream.stream, request.writer
        )
        return pb.RemoveWriterResponse(result=_REMOVE[outcome])
