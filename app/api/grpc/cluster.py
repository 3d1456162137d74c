"""getControllerToBucketMapping: which controller the leader assigned each retention or
watermarking bucket to."""

from __future__ import annotations

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.cluster import BucketService
from app.services.cluster import ClusterQueries

_SERVICE_OF = {
    pb.ControllerToBucketMappingRequest.RetentionService: BucketService.RETENTION,
    pb.ControllerToBucketMappingRequest.WatermarkingService: BucketService.WATERMARKS,
}


class ClusterRpcs:
    def __init__(self, cluster: ClusterQueries) -> None:
        self._cluster = cluster

    async def rpc_getControllerToBucketMapping(
        self, request: pb.ControllerToBucketMappingRequest
    ) -> pb.ControllerToBucketMappingResponse:
        # An unknown enum number decodes as itself; Pravega would fail on it, we answer empty.
        service = _SERVICE_OF.get(request.serviceType)
        if service is None:
            return pb.ControllerToBucketMappingResponse()
        mapping = await self._cluster.bucket_mapping(service)
        return pb.ControllerToBucketMappingResponse(
            mapping={member: pb.BucketIds(id=buckets) for member, buckets in mapping.items()}
        )
