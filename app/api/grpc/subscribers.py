"""gRPC RPCs of consumption-based retention: listSubscribers and
updateSubscriberStreamCut, served through ControllerService's `extensions`.

Every outcome Pravega names is a status enum of the contract; only empty names and store outages
surface as gRPC errors (mapped in one place by the service's error handling).
"""

from __future__ import annotations

from app.api.grpc.convert import statuses_by_name
from app.api.grpc.proto import controller_pb2 as pb
from app.domain.errors import NotFound
from app.services.retention import SubscriberService, SubscriberUpdate

_UPDATE_STATUS = statuses_by_name(SubscriberUpdate, pb.UpdateSubscriberStatus.Status)


class SubscriberRpcs:
    def __init__(self, subscribers: SubscriberService) -> None:
        self._subscribers = subscribers

    async def rpc_listSubscribers(self, request: pb.StreamInfo) -> pb.SubscribersResponse:
        try:
            names = await self._subscribers.list_subscribers(request.scope, request.stream)
        except NotFound:
            return pb.SubscribersResponse(status=pb.SubscribersResponse.STREAM_NOT_FOUND)
        return pb.SubscribersResponse(subscribers=names, status=pb.SubscribersResponse.SUCCESS)

    async def rpc_updateSubscriberStreamCut(
        self, request: pb.SubscriberStreamCut
    ) -> pb.UpdateSubscriberStatus:
        info = request.streamCut.streamInfo
        outcome = await self._subscribers.update_subscriber_stream_cut(
            info.scope,
            info.stream,
            request.subscriber,
            request.readerGroupId,
            request.generation,
            dict(request.streamCut.cut),
        )
        return pb.UpdateSubscriberStatus(status=_UPDATE_STATUS[outcome])
